"""The verdict on an output's markers, shared by the sinks' parts of `dstreams audit`
(`service.cli.sink_audit`): one committed marker per (batch, partition) of each completed batch,
none beyond the batch's task count, none twice."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from service.journal.audit import Violation
from service.journal.base import JournalState

Tasks = Mapping[int, int | None]
"""An output's completed batches: batch time -> its number of tasks (None: not journaled)."""
Part = tuple[int, int]
"""(batch time, partition)."""


@dataclass(frozen=True)
class OutputCheck:
    """What the audit checked of one output: `kind` is its sink's type (or `unconfigured`)."""

    output: str
    kind: str
    checked: bool
    batches: int
    violations: tuple[Violation, ...] = ()
    notes: tuple[str, ...] = ()
    """What could not be checked, and why; and counts worth showing (dead letters)."""


def journaled_rows(state: JournalState, output: str) -> int:
    """The rows the journal's completed records say `output` wrote (a replay's skips not
    counted), for the dead-letter count."""
    return sum(record.outputs.get(output, 0) for record in state.completed.values())


def marker_violations(
    output: str,
    tasks: Tasks,
    found: Counter[Part],
    unknowable: Callable[[int, int], bool] = lambda t, p: False,
) -> tuple[list[Violation], list[str]]:
    """Every marker missing, duplicated or beyond its batch's task count, for the completed
    batches `tasks`; and notes on what could not be checked. `found` counts the committed
    markers by (batch, partition); `unknowable(t, p)`: a missing marker may have been removed
    by the sink's own clean-up (a compacted marker topic), so it is not held against it."""
    violations = [
        Violation(
            "duplicate-marker",
            f"output {output} batch {t} partition {p} is committed {n} times (a duplicated "
            "part: its rows were written more than once)",
        )
        for (t, p), n in sorted(found.items())
        if n > 1
    ]
    missing, extra = _unmatched(tasks, found)
    violations += [_missing(output, t, p, tasks[t]) for t, p in missing if not unknowable(t, p)]
    violations += [_extra(output, t, p, tasks[t]) for t, p in extra]
    notes = []
    unrecorded = sum(1 for n in tasks.values() if n is None)
    if unrecorded:
        notes.append(
            f"{unrecorded} batches not checked: journaled by an older build that did not "
            "record their number of partitions"
        )
    lost = sum(1 for t, p in missing if unknowable(t, p))
    if lost:
        notes.append(f"{lost} markers not checked: removed by the marker topic's compaction")
    return violations, notes


def _unmatched(tasks: Tasks, found: Counter[Part]) -> tuple[list[Part], list[Part]]:
    """The (batch, partition) pairs of completed batches with no marker, and the markers of
    completed batches beyond their task count; batches with no recorded count are left out."""
    highest: dict[int, int] = {}
    for t, p in found:
        highest[t] = max(highest.get(t, p), p)
    missing: list[Part] = []
    extra: list[Part] = []
    for t, n in sorted(tasks.items()):
        if n is not None:
            missing += [(t, p) for p in range(n) if not found[(t, p)]]
            extra += [(t, p) for p in range(n, highest.get(t, -1) + 1) if found[(t, p)]]
    return missing, extra


def _missing(output: str, t: int, p: int, n: int | None) -> Violation:
    what = f"output {output} batch {t}: partition {p} of {n} has no committed marker"
    return Violation("missing-marker", what + " (journaled as completed, never committed)")


def _extra(output: str, t: int, p: int, n: int | None) -> Violation:
    what = f"output {output} batch {t}: a marker for partition {p}, but the batch had {n} tasks"
    return Violation("extra-marker", what)
