"""The journal contract, and the pure fold of its records into the driver's master state.

A backend only stores records durably and fences older writers; everything the driver concludes
from them (current epoch, pending batches, where to resume, whether the journal is consistent)
is computed here, once, for every backend.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from connectors.offsets import OffsetRange
from service.errors import JournalError, OffsetGap
from service.journal.records import (
    AnyRecord,
    CheckpointRecord,
    CompletedRecord,
    EpochRecord,
    JournalRecord,
    PlannedRecord,
    SnapshotRecord,
)

TopicPartition = tuple[str, int]
RETAINED_CHECKPOINTS = 2
"""Checkpoints kept (files and journal records): the latest, and one to fall back to."""

_FIX_HINT = (
    "Inspect the journal with `dstreams journal show`. Restore it from a copy if you have one; "
    "otherwise start the job with a new journal and explicit starting offsets, accepting that the "
    "offsets in question are skipped or read twice."
)


@runtime_checkable
class Journal(Protocol):
    """Durable, fenced, append-only store of the driver's master state."""

    def open(self) -> int:
        """Take a new epoch (1 + the highest seen), journal it, fence older writers; return it."""
        ...

    def append(self, record: JournalRecord) -> None:
        """Store `record` durably before returning; `FencedOut` if a newer epoch exists."""
        ...

    def read(self) -> list[JournalRecord]:
        """Every record needed to rebuild the state, in the order they were appended."""
        ...

    def close(self) -> None:
        """Release the backend's resources; the epoch is not given up (a newer open fences it)."""
        ...


class WritingJournal:
    """What each journal backend keeps of its writing: the epoch it holds, and the failure that
    left its store in a state it cannot know, after which it refuses every append (only a new
    writer, which reads the store afresh, can go on)."""

    _epoch: int | None = None
    _broken: str | None = None

    @property
    def epoch(self) -> int | None:
        """The epoch this writer holds, once `open` has returned."""
        return self._epoch

    def _refuse_if_broken(self, journal: str, failed: str, unknown: str) -> None:
        if self._broken is not None:
            msg = (
                f"{journal} refused the append: an earlier {failed} failed ({self._broken}) and "
                f"{unknown} state is unknown; restart the driver"
            )
            raise JournalError(msg)


def replay(records: Iterable[AnyRecord]) -> list[JournalRecord]:
    """Flatten snapshots: each one stands for everything appended before it."""
    out: list[JournalRecord] = []
    for record in records:
        if isinstance(record, SnapshotRecord):
            out = list(record.records)
        else:
            out.append(record)
    return out


@dataclass(frozen=True)
class JournalState:
    """What a list of journal records says, folded in order. Build with `from_records`."""

    epoch: int
    epochs: tuple[EpochRecord, ...]
    planned: dict[int, PlannedRecord]
    completed: dict[int, CompletedRecord]
    checkpoint: CheckpointRecord | None
    records: tuple[JournalRecord, ...]
    checkpoints: tuple[CheckpointRecord, ...] = ()
    """Every checkpoint record, oldest first; recovery may fall back to the one before the last."""

    @classmethod
    def from_records(cls, records: Iterable[JournalRecord]) -> JournalState:
        ordered = tuple(records)
        planned: dict[int, PlannedRecord] = {}
        completed: dict[int, CompletedRecord] = {}
        checkpoint: CheckpointRecord | None = None
        for record in ordered:
            if isinstance(record, PlannedRecord):
                planned[record.batch_time] = record
            elif isinstance(record, CompletedRecord):
                completed[record.batch_time] = record
            elif isinstance(record, CheckpointRecord):
                checkpoint = record
        epochs = tuple(r for r in ordered if isinstance(r, EpochRecord))
        epoch = max((r.epoch for r in epochs), default=0)
        checkpoints = tuple(r for r in ordered if isinstance(r, CheckpointRecord))
        return cls(epoch, epochs, planned, completed, checkpoint, ordered, checkpoints)

    @property
    def retained_checkpoints(self) -> tuple[CheckpointRecord, ...]:
        """The checkpoints recovery may start from (the latest, and the ones kept before it)."""
        return self.checkpoints[-RETAINED_CHECKPOINTS:]

    @property
    def last_planned(self) -> PlannedRecord | None:
        return self.planned[max(self.planned)] if self.planned else None

    @property
    def last_completed(self) -> CompletedRecord | None:
        return self.completed[max(self.completed)] if self.completed else None

    def pending(self) -> list[PlannedRecord]:
        """Batches planned but not completed, oldest first: recovery re-runs these."""
        return [self.planned[t] for t in sorted(self.planned) if t not in self.completed]

    def last_positions(self) -> dict[TopicPartition, int]:
        """Per topic-partition, the next offset to plan: the `until` of its latest planned range."""
        positions: dict[TopicPartition, int] = {}
        for t in sorted(self.planned):
            for r in sorted(self.planned[t].ranges):
                positions[r.topic_partition] = r.until_offset
        return positions

    def validate(self) -> None:
        """Raise if the records could not have come from a correct, fenced driver."""
        _check_epochs(self.records)
        _check_replans(self.records)
        _check_completed_were_planned(self)
        _check_contiguity(self.planned)

    def summary(self) -> dict[str, Any]:
        """A JSON-able overview for people (`dstreams journal show`)."""
        last_p, last_c = self.last_planned, self.last_completed
        return {
            "epoch": self.epoch,
            "epochs": [r.to_json() for r in self.epochs],
            "records": len(self.records),
            "planned_batches": len(self.planned),
            "last_planned": last_p.to_json() if last_p else None,
            "last_completed": last_c.to_json() if last_c else None,
            "checkpoint": self.checkpoint.to_json() if self.checkpoint else None,
            "pending": [r.batch_time for r in self.pending()],
            "positions": {f"{t}-{p}": o for (t, p), o in sorted(self.last_positions().items())},
        }


def compact(records: Iterable[JournalRecord]) -> list[JournalRecord]:
    """The records a recovery still needs, in their original order.

    Kept: the latest epoch record (epoch numbering and fencing), the retained checkpoints (the
    latest and the one before it, which recovery falls back to if the latest is damaged), and
    every planned/completed record from the horizon on. The horizon is the earliest of: the batch
    of the oldest retained checkpoint (state is recomputed from there), the oldest pending batch,
    the last completed batch, and each partition's last planned batch (so no resume position is
    lost). Keeping one contiguous run of batches means `validate` still sees every neighbouring
    pair of ranges.
    """
    ordered = list(records)
    state = JournalState.from_records(ordered)
    horizon = _horizon(state)
    latest_epoch = state.epochs[-1] if state.epochs else None
    retained = {id(record) for record in state.retained_checkpoints}
    kept: list[JournalRecord] = []
    for record in ordered:
        if record is latest_epoch or id(record) in retained:
            kept.append(record)
        elif isinstance(record, PlannedRecord | CompletedRecord):
            if horizon is not None and record.batch_time >= horizon:
                kept.append(record)
    return kept


def forgotten_before(records: Iterable[JournalRecord]) -> int | None:
    """The batch time before which `compact` drops every planned and completed record: no
    recovery replays, recomputes or resumes from an earlier batch. None: nothing is dropped."""
    return _horizon(JournalState.from_records(records))


def _horizon(state: JournalState) -> int | None:
    if not state.planned:
        return None
    candidates = [t for t in state.planned if t not in state.completed]
    if state.completed:
        candidates.append(max(state.completed))
    if state.retained_checkpoints:
        # The checkpoint's own batch stays too: it shows recovery that nothing after it is gone.
        cut = state.retained_checkpoints[0].batch_time
        candidates.extend(t for t in state.planned if t >= cut)
    last_seen: dict[TopicPartition, int] = {}
    for t, record in state.planned.items():
        for r in record.ranges:
            last_seen[r.topic_partition] = max(t, last_seen.get(r.topic_partition, t))
    candidates.extend(last_seen.values())
    return min(candidates)


def _check_epochs(records: Iterable[JournalRecord]) -> None:
    """Epochs only grow, and nothing is appended by an epoch older than one already journaled."""
    highest = 0
    for index, record in enumerate(records):
        if isinstance(record, EpochRecord):
            if record.epoch <= highest:
                msg = (
                    f"journal record #{index} opens epoch {record.epoch}, but epoch {highest} was "
                    "already opened; expected every new epoch to be higher. Two drivers opened "
                    f"the journal without fencing each other. {_FIX_HINT}"
                )
                raise JournalError(msg)
            highest = record.epoch
        elif record.epoch < highest:
            msg = (
                f"journal record #{index} ({type(record).__name__} of batch "
                f"{getattr(record, 'batch_time', '?')}) was written by epoch {record.epoch} after "
                f"epoch {highest} had taken over; expected the older driver to be fenced. "
                f"Make sure only one driver runs per journal. {_FIX_HINT}"
            )
            raise JournalError(msg)


def _check_replans(records: Iterable[JournalRecord]) -> None:
    """A batch planned twice (e.g. again by a recovering epoch) must cover the same offsets.

    `extra` is not compared: besides source positions it carries annotations (such as the graph
    description recovery writes with an epoch's first plan) that may differ between epochs.
    """
    first: dict[int, PlannedRecord] = {}
    for record in records:
        if not isinstance(record, PlannedRecord):
            continue
        earlier = first.setdefault(record.batch_time, record)
        if sorted(earlier.ranges) != sorted(record.ranges):
            found = (
                f"batch {record.batch_time} was planned twice with different inputs: epoch "
                f"{earlier.epoch} planned {_describe(earlier)}, epoch {record.epoch} planned "
                f"{_describe(record)}"
            )
            expected = "a re-planned batch to reuse its journaled ranges, or its output would "
            expected += "differ between runs"
            raise JournalError(_broken(found, expected))


def _check_completed_were_planned(state: JournalState) -> None:
    unplanned = sorted(t for t in state.completed if t not in state.planned)
    if unplanned:
        found = f"batches {unplanned} are journaled as completed but were never planned"
        raise JournalError(
            _broken(found, "every completed batch to have a planned record before it")
        )


def _check_contiguity(planned: dict[int, PlannedRecord]) -> None:
    """Per partition, each batch starts exactly where the previous batch with it ended."""
    previous: dict[TopicPartition, tuple[int, int]] = {}
    for t in sorted(planned):
        for r in sorted(planned[t].ranges, key=lambda r: (r.topic, r.partition, r.from_offset)):
            seen = previous.get(r.topic_partition)
            if seen is not None and seen[1] != r.from_offset:
                raise _gap(r, seen[0], seen[1], t)
            previous[r.topic_partition] = (t, r.until_offset)


def _gap(r: OffsetRange, prev_time: int, prev_until: int, t: int) -> OffsetGap:
    delta = r.from_offset - prev_until
    what = f"{delta} offsets never read" if delta > 0 else f"{-delta} offsets read twice"
    found = (
        f"offsets of topic {r.topic!r} partition {r.partition} are not contiguous: batch "
        f"{prev_time} planned until offset {prev_until}, batch {t} planned from offset "
        f"{r.from_offset} ({what})"
    )
    return OffsetGap(_broken(found, "each batch to start where the previous one ended"))


def _broken(found: str, expected: str) -> str:
    """A message for a journal that breaks one of its rules: what is there, what was expected,
    and what to do."""
    return f"{found}; expected {expected}. {_FIX_HINT}"


def _describe(record: PlannedRecord) -> str:
    ranges = ", ".join(
        f"{r.topic}-{r.partition}[{r.from_offset},{r.until_offset})" for r in sorted(record.ranges)
    )
    return f"{{{ranges}}}"
