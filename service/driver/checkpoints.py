"""Step 7 of the batch lifecycle, and the state half of recovery (docs/architecture.md).

Checkpoint of batch `t` (every `checkpoint.interval_batches` completed batches, stateful graphs
only):

1. `pieces`: every stateful stream names the RDDs it needs to carry on after `t`.
2. `write`: one Spark job writes every partition of every piece to the checkpoint store (each
   task publishes its part whole: temporary name, fsync, rename; or one upload to object
   storage); then each piece's manifest, durably.
3. `journal`: `checkpoint(t, refs)` is appended; only now does recovery use it.
4. `delete_old`: checkpoints older than the retained ones are deleted (files or objects; the
   journal's compaction drops their records and the batches only they needed).
5. `truncate`: each stream carries on from its pieces read back from the store, so the lineage
   (and the driver's memory of it) never grows past one checkpoint interval.

Recovery (`recover`, between restoring source positions and replaying pending batches):

1. A fresh stateful journal gets an initial checkpoint record (no refs: the job's initial state),
   so that compaction never drops a batch the state depends on.
2. Load the latest retained checkpoint; if it is missing or damaged, the previous one, if the
   journal still holds every batch after it; else refuse.
3. Refuse if a source can no longer read a batch that must be computed again
   (`InputDStream.check_replayable`: Kafka retention deleted its offsets).
4. Recompute the state through every completed batch after the checkpoint with its journaled
   plan, without running outputs (their results are committed already); a keyed state folds
   them all in one pass (`StreamingContext.catch_up_stateful`).
"""

from __future__ import annotations

import logging
import time
from typing import Protocol

from service import faults
from service.driver.recovery import journaled_plan
from service.driver.warm_state import PreloadedCheckpoint
from service.errors import DStreamsError
from service.graph.base import RDD
from service.graph.checkpoint_store import CheckpointError, CheckpointStore, PieceManifest
from service.graph.context import StreamingContext
from service.graph.dstream import StatefulDStream
from service.journal.base import RETAINED_CHECKPOINTS, JournalState
from service.journal.records import CheckpointRecord

log = logging.getLogger(__name__)
INITIAL_CHECKPOINT_TIME = 0
"""Batch time of the initial checkpoint record: before every batch."""


class StateRecoveryError(DStreamsError):
    """The state of a stateful graph cannot be rebuilt from the checkpoints and the journal."""


class CheckpointJournal(Protocol):
    def journal_checkpoint(self, batch_time: int, refs: dict[str, str]) -> None: ...


class CheckpointObserver(Protocol):
    def checkpoint_written(
        self, batch_time: int, seconds: float, size: int, streams: dict[str, dict[str, int]]
    ) -> None: ...

    def state_recomputed(self, batches: int) -> None: ...


def default_interval_batches(batch_interval_ms: int) -> int:
    """About one checkpoint every 10 s of batches."""
    return max(1, round(10_000 / batch_interval_ms))


class StateCheckpoints:
    """Writes checkpoints after completed batches and restores state on recovery."""

    def __init__(
        self,
        ctx: StreamingContext,
        store: CheckpointStore,
        journal: CheckpointJournal | None,
        interval_batches: int,
        observer: CheckpointObserver | None = None,
        preloaded: PreloadedCheckpoint | None = None,
    ) -> None:
        self.ctx = ctx
        self.preloaded = preloaded
        """A warm standby's state read ahead of the take-over (`service.driver.warm_state`)."""
        self.reused_preloaded = False
        self.store = store
        self.journal = journal
        self.interval_batches = interval_batches
        self.observer = observer
        self.streams = ctx.stateful_streams()
        self.since_checkpoint = 0
        self.journaled: list[int] = []
        self.last_checkpoint_monotonic: float | None = None

    # --- after each completed batch ------------------------------------------------------------

    def after_completed(self, batch_time: int) -> None:
        if not self.streams:
            return
        self.since_checkpoint += 1
        if self.since_checkpoint >= self.interval_batches:
            self.checkpoint(batch_time)

    def checkpoint(self, batch_time: int) -> dict[str, str]:
        started = time.monotonic()
        pieces = [(s, piece) for s in self.streams for piece in s.checkpoint_pieces(batch_time)]
        jobs = [(p.rdd, self.store.piece_ref(batch_time, p.name), p.fmt) for _, p in pieces]
        manifests = self.store.write_pieces(self.ctx.sc, jobs)
        self.store.sync(batch_time)
        faults.crash_point("checkpoint-files-written")
        refs = {piece.name: self.store.piece_ref(batch_time, piece.name) for _, piece in pieces}
        if self.journal is not None:
            self.journal.journal_checkpoint(batch_time, refs)
        faults.crash_point("checkpoint-journaled")
        self.journaled.append(batch_time)
        self.delete_old()
        self.truncate(batch_time, refs, manifests)
        self.since_checkpoint = 0
        self.last_checkpoint_monotonic = time.monotonic()
        size = sum(m.total_bytes for m in manifests.values())
        if self.observer is not None:
            figures = {
                stream.piece_prefix.rstrip("-"): stream.computation.state_summary()
                for stream in self.streams
            }
            self.observer.checkpoint_written(batch_time, time.monotonic() - started, size, figures)
        log.info(
            "checkpoint of batch %d: %d pieces, %d bytes (%.2fs)",
            batch_time,
            len(refs),
            size,
            time.monotonic() - started,
        )
        return refs

    def delete_old(self) -> None:
        """Deletes checkpoint folders older than the retained ones (never newer ones: a
        fenced-out driver must not delete what its successor wrote)."""
        kept = self.journaled[-RETAINED_CHECKPOINTS:]
        self.journaled = kept
        for old in self.store.batch_times():
            if old < kept[0]:
                self.store.delete(old)

    def truncate(
        self, batch_time: int, refs: dict[str, str], manifests: dict[str, PieceManifest]
    ) -> None:
        loaded = {n: self.store.load(self.ctx.sc, r, manifests[r]) for n, r in refs.items()}
        self._carry_on(batch_time, refs, manifests, loaded)

    def _carry_on(
        self,
        batch_time: int,
        refs: dict[str, str],
        manifests: dict[str, PieceManifest],
        loaded: dict[str, RDD],
    ) -> None:
        """Every stream carries on from its pieces (`loaded`, keyed by piece name)."""
        for stream in self.streams:
            mine = {n: r for n, r in refs.items() if n.startswith(stream.piece_prefix)}
            stream.restore(batch_time, {n: loaded[n] for n in mine})
            _summarise(stream, [manifests[r] for r in mine.values()])

    # --- recovery ------------------------------------------------------------------------------

    def recover(self, state: JournalState, epoch: int) -> int:
        """Restores state and recomputes it up to the first pending batch; returns how many
        completed batches were recomputed."""
        if not self.streams:
            return 0
        if not state.checkpoints:
            self._start_fresh(state, epoch)
            return 0
        record = self._usable_checkpoint(state)
        after = [
            journaled_plan(state.planned[t], self.ctx)
            for t in sorted(state.planned)
            if t > record.batch_time
        ]
        for source in self.ctx.inputs:
            source.check_replayable(after)
        pending = {r.batch_time for r in state.pending()}
        recompute = [plan for plan in after if plan.batch_time not in pending]
        if pending and recompute and recompute[-1].batch_time > min(pending):
            msg = f"completed batches follow pending batch {min(pending)}; the journal is damaged"
            raise StateRecoveryError(msg)
        self.ctx.catch_up_stateful(recompute)
        self.since_checkpoint = len(recompute)
        self.journaled = [r.batch_time for r in state.retained_checkpoints]
        if self.observer is not None:
            self.observer.state_recomputed(len(recompute))
        log.info(
            "state restored from the checkpoint of batch %d; %d completed batches recomputed",
            record.batch_time,
            len(recompute),
        )
        return len(recompute)

    def _start_fresh(self, state: JournalState, epoch: int) -> None:
        if state.planned:
            msg = (
                f"the journal holds {len(state.planned)} batches but no checkpoint record, so "
                "the state of this stateful graph cannot be rebuilt (was it written by a "
                "stateless version of the job?). Start the job under a new app id and journal."
            )
            raise StateRecoveryError(msg)
        if self.journal is not None:
            self.journal.journal_checkpoint(INITIAL_CHECKPOINT_TIME, {})
        self.journaled = [INITIAL_CHECKPOINT_TIME]

    def _usable_checkpoint(self, state: JournalState) -> CheckpointRecord:
        problems: list[str] = []
        for record in reversed(state.retained_checkpoints):
            if record is not state.checkpoint and not _journal_covers(state, record):
                problems.append(f"batch {record.batch_time}: the journal no longer holds it")
                continue
            try:
                self._restore(record)
                return record
            except CheckpointError as error:
                log.warning("checkpoint of batch %d unusable: %s", record.batch_time, error)
                problems.append(f"batch {record.batch_time}: {error}")
        msg = (
            f"no usable checkpoint under {self.store.location}: {'; '.join(problems)}. Restore the "
            "checkpoint directory from a copy, or start the job under a new app id and journal "
            "(its state then starts empty)."
        )
        raise StateRecoveryError(msg)

    def _restore(self, record: CheckpointRecord) -> None:
        if not record.refs:
            return  # the initial checkpoint: the streams start from the job's initial state
        preloaded, self.preloaded = self.preloaded, None
        if preloaded is not None and preloaded.matches(record):
            # Verified and read when it was pre-loaded; the files are only read again if Spark
            # loses a cached block.
            self._carry_on(record.batch_time, preloaded.refs, preloaded.manifests, preloaded.rdds)
            self.reused_preloaded = True
            log.info("state taken from the pre-loaded checkpoint of batch %d", record.batch_time)
            return
        if preloaded is not None:
            log.info(
                "pre-loaded checkpoint %d is not the one recovery uses (%d); loading that one",
                preloaded.batch_time,
                record.batch_time,
            )
            preloaded.release()
        manifests = {ref: self.store.verify(ref) for ref in record.refs.values()}
        self.truncate(record.batch_time, dict(record.refs), manifests)


def _journal_covers(state: JournalState, record: CheckpointRecord) -> bool:
    if record.batch_time == INITIAL_CHECKPOINT_TIME and not record.refs:
        return True
    return record.batch_time in state.planned


def _summarise(stream: StatefulDStream, manifests: list[PieceManifest]) -> None:
    stream.computation.summarise(
        keys=sum(m.total_records for m in manifests if m.fmt == "state"),
        size=sum(m.total_bytes for m in manifests),
    )
