"""The sinks' part of `dstreams audit`: each batch the journal completed is committed, once, in
the sink of each of its outputs.

Checked today for the files sink (`sinks.files`), for every completed batch of its outputs:
`t=<batch>/_SUCCESS` exists and names how many partitions the batch was written with, every part
`0 .. n-1` is there, and no other part is (a duplicated or stray part would be read as output).
Outputs of other sinks (Kafka, PostgreSQL, the console, dead letters) are listed as not checked.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from service.journal.audit import Violation
from service.journal.base import JournalState

if TYPE_CHECKING:
    from service.config.settings import Settings
    from sinks.files import FileSink


@dataclass(frozen=True)
class OutputCheck:
    """What the audit checked of one output: `kind` is its sink's type (or `unconfigured`)."""

    output: str
    kind: str
    checked: bool
    batches: int
    violations: tuple[Violation, ...] = ()


def check_outputs(settings: Settings, state: JournalState) -> list[OutputCheck]:
    """One check per output the journal's completed batches name, in name order."""
    times_by_output: dict[str, list[int]] = {}
    for t in sorted(state.completed):
        for output in state.completed[t].outputs:
            times_by_output.setdefault(output, []).append(t)
    return [_check_output(settings, o, times) for o, times in sorted(times_by_output.items())]


def _check_output(settings: Settings, output: str, times: list[int]) -> OutputCheck:
    from service.config.sinks import FilesSinkSettings
    from service.driver.wiring import make_sink
    from sinks.files import FileSink

    configured = settings.sinks.get(output)
    # Only a files sink is built: building the others could open clients the audit does not use.
    sink = make_sink(settings, output) if isinstance(configured, FilesSinkSettings) else None
    if not isinstance(sink, FileSink):
        kind = configured.type if configured is not None else _unconfigured(output)
        return OutputCheck(output, kind, False, len(times))
    violations = check_file_output(sink, output, times)
    return OutputCheck(output, "files", True, len(times), tuple(violations))


def _unconfigured(output: str) -> str:
    from service.graph.outputs import DEAD_LETTER_SUFFIX

    return "dead-letters" if output.endswith(DEAD_LETTER_SUFFIX) else "unconfigured"


def check_file_output(sink: FileSink, output: str, batch_times: Iterable[int]) -> list[Violation]:
    """Every violation of `output`'s completed batches in the files sink, oldest batch first."""
    violations: list[Violation] = []
    for t in batch_times:
        violations += _check_batch(sink, output, t)
    return violations


def _check_batch(sink: FileSink, output: str, t: int) -> list[Violation]:
    from sinks.files import SUCCESS

    folder = sink.batch_dir(output, t)
    marker = folder / SUCCESS
    if not marker.is_file():
        what = f"output {output} batch {t} is journaled as completed, but {marker} is missing"
        return [Violation("uncommitted", what)]
    try:
        partitions = int(json.loads(marker.read_text())["partitions"])
    except (ValueError, KeyError, TypeError) as error:
        what = f"{marker} does not name the batch's partitions ({error!r})"
        return [Violation("uncommitted", what)]
    expected = {f"part-{p:05d}.{sink.suffix}" for p in range(partitions)}
    found = {path.name for path in folder.glob("part-*")}
    violations = [
        Violation("missing-part", f"output {output} batch {t}: {name} of {partitions} is missing")
        for name in sorted(expected - found)
    ]
    violations += [
        Violation(
            "extra-part",
            f"output {output} batch {t}: {name} is not one of the {partitions} parts its "
            f"{SUCCESS} names (a duplicated or stray part, read as output)",
        )
        for name in sorted(found - expected)
    ]
    return violations
