"""The journal's part of the exactly-once audit (`dstreams audit`): every input offset planned
exactly once.

A pure function of the folded journal, so it needs no broker and no sink. It checks, and reports
every violation rather than stopping at the first:

1. per topic partition, in batch-time order, each planned range starts where the previous one
   ended: a gap is offsets no batch read, an overlap offsets two batches read;
2. a batch planned again (by a recovering driver) covers the same offsets as the first time;
3. every completed batch was planned;
4. the offsets a read skipped because retention had deleted them (`CompletedRecord.skipped`,
   a source with `fail_on_data_loss` off) lie inside that batch's planned ranges; they are
   counted as lost, not as violations, because the journal records the loss.

A compacted journal is audited from its first kept batch (docs/architecture.md, "The journal").
Offsets the planner skipped because retention deleted them before planning leave no journal
record, so they show as a gap: the audit cannot tell them from a lost plan.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from connectors.offsets import OffsetRange
from service.journal.base import JournalState, TopicPartition
from service.journal.records import JournalRecord, PlannedRecord


@dataclass(frozen=True)
class Violation:
    """One broken promise of the journal, found by `audit_journal`.

    `kind` is gap, overlap, replanned, unplanned or skipped-unplanned; `message` says which
    batches and offsets, and what was expected instead."""

    kind: str
    message: str


@dataclass(frozen=True)
class PartitionCoverage:
    """What the journal's batches planned of one partition: `[from_offset, until_offset)`."""

    topic: str
    partition: int
    from_offset: int
    until_offset: int
    batches: int
    lost: int = 0
    """Offsets inside the planned ranges that reads skipped because retention deleted them
    (counted only for sources read with `fail_on_data_loss: false`)."""


@dataclass(frozen=True)
class JournalAudit:
    """The result of `audit_journal`; `ok` when there is no violation."""

    planned: tuple[int, ...]
    completed: tuple[int, ...]
    pending: tuple[int, ...]
    partitions: tuple[PartitionCoverage, ...]
    violations: tuple[Violation, ...] = field(default=())

    @property
    def ok(self) -> bool:
        return not self.violations


def audit_journal(state: JournalState) -> JournalAudit:
    """Check that the journal planned every input offset exactly once (the steps above)."""
    coverage, violations = _chain_ranges(state.planned)
    violations += _replans(state.records)
    violations += _unplanned(state)
    lost, skipped_violations = _skipped(state)
    violations += skipped_violations
    partitions = tuple(
        PartitionCoverage(tp[0], tp[1], start, end, batches, lost.get(tp, 0))
        for tp, (start, end, batches) in sorted(coverage.items())
    )
    return JournalAudit(
        planned=tuple(sorted(state.planned)),
        completed=tuple(sorted(state.completed)),
        pending=tuple(r.batch_time for r in state.pending()),
        partitions=partitions,
        violations=tuple(violations),
    )


_Coverage = dict[TopicPartition, tuple[int, int, int]]  # first offset, end, batches


def _chain_ranges(planned: dict[int, PlannedRecord]) -> tuple[_Coverage, list[Violation]]:
    """Step 1: per partition, each range must start where the one before it ended."""
    coverage: _Coverage = {}
    last_batch: dict[TopicPartition, int] = {}
    violations: list[Violation] = []
    for t in sorted(planned):
        for r in sorted(planned[t].ranges):
            tp = r.topic_partition
            if tp not in coverage:
                coverage[tp] = (r.from_offset, r.until_offset, 1)
            else:
                start, end, batches = coverage[tp]
                if r.from_offset != end:
                    violations.append(_break(r, end, last_batch[tp], t))
                coverage[tp] = (start, r.until_offset, batches + (1 if last_batch[tp] != t else 0))
            last_batch[tp] = t
    return coverage, violations


def _break(r: OffsetRange, end: int, before: int, t: int) -> Violation:
    where = f"{r.topic}-{r.partition}"
    if r.from_offset > end:
        return Violation(
            "gap",
            f"{where}: offsets [{end}, {r.from_offset}) were never planned "
            f"({r.from_offset - end} offsets): batch {before} ended at {end}, batch {t} "
            f"started at {r.from_offset}",
        )
    overlap_end = min(end, r.until_offset)
    return Violation(
        "overlap",
        f"{where}: offsets [{r.from_offset}, {overlap_end}) were planned twice, by batch "
        f"{before} (until {end}) and by batch {t} (from {r.from_offset})",
    )


def _replans(records: Iterable[JournalRecord]) -> list[Violation]:
    """Step 2: a batch planned twice must cover the same offsets both times."""
    first: dict[int, PlannedRecord] = {}
    violations: list[Violation] = []
    for record in records:
        if not isinstance(record, PlannedRecord):
            continue
        earlier = first.setdefault(record.batch_time, record)
        if sorted(earlier.ranges) != sorted(record.ranges):
            violations.append(
                Violation(
                    "replanned",
                    f"batch {record.batch_time} was planned by epoch {earlier.epoch} as "
                    f"{_ranges(earlier.ranges)} and again by epoch {record.epoch} as "
                    f"{_ranges(record.ranges)}",
                )
            )
    return violations


def _unplanned(state: JournalState) -> list[Violation]:
    """Step 3: every completed batch has a plan."""
    return [
        Violation("unplanned", f"batch {t} is journaled as completed but was never planned")
        for t in sorted(state.completed)
        if t not in state.planned
    ]


def _skipped(state: JournalState) -> tuple[dict[TopicPartition, int], list[Violation]]:
    """Step 4: offsets lost to retention, per partition, each inside its batch's plan."""
    lost: dict[TopicPartition, int] = {}
    violations: list[Violation] = []
    for t in sorted(state.completed):
        plan = state.planned.get(t)
        for r in state.completed[t].skipped:
            if plan is not None and not any(_inside(r, p) for p in plan.ranges):
                violations.append(
                    Violation(
                        "skipped-unplanned",
                        f"batch {t} records {_ranges([r])} as deleted before it could read "
                        f"them, but planned only {_ranges(plan.ranges)}",
                    )
                )
            lost[r.topic_partition] = lost.get(r.topic_partition, 0) + r.count
    return lost, violations


def _inside(inner: OffsetRange, outer: OffsetRange) -> bool:
    return (
        inner.topic_partition == outer.topic_partition
        and outer.from_offset <= inner.from_offset
        and inner.until_offset <= outer.until_offset
    )


def _ranges(ranges: Iterable[OffsetRange]) -> str:
    parts = [f"{r.topic}-{r.partition}[{r.from_offset},{r.until_offset})" for r in sorted(ranges)]
    return "{" + ", ".join(parts) + "}"
