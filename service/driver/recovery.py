"""Driver recovery: carry on from the journal after a crash, without loss or duplication.

0. `check_before_start`: steps 2–3 once before Spark starts, so that a damaged journal or a
   changed graph is refused in about a second; they run again under the new epoch, because
   only what is read after fencing every older driver is final.
1. `open_epoch`: take a new epoch in the journal; from now on an older driver's appends fail.
2. `read_state`: fold the journal and check it (contiguous ranges, consistent re-plans).
3. `check_graph`: the job's graph must be the one that planned the journaled batches.
4. `restore_positions`: every source resumes after its journaled plans (`InputDStream.resume`).
4b. `checkpoints.recover` (stateful graphs): load the latest usable checkpoint and recompute the
   state through the completed batches after it (see `service.driver.checkpoints`). A keyed
   state or window whose partition count alone changed runs them in the journal's count and
   moves into the new one after step 5 (`service.driver.rescale`).
5. `replay_pending`: batches planned but not completed run again with their journaled plans;
   sinks skip the (batch, partition) keys they already committed.
6. `first_new_batch_time`: new batches start at the interval after the last planned one, so the
   intervals of the driver's down time get their batches too, as Spark's JobGenerator does
   ("batches during down time"): batch time has no holes, a window exists at every slide
   boundary, and the backlog is spread over those batches within the rate budget. The scheduler
   runs overdue batches back to back; a batch where nothing can change runs no Spark job.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from typing import Any

from connectors.offsets import Skipped
from service.driver.lifecycle import BatchLifecycle
from service.driver.rescale import Rescale, state_rescales
from service.driver.scheduler import align_down, now_ms
from service.errors import GraphChanged
from service.graph import layout
from service.graph.context import StreamingContext
from service.graph.plan import BatchPlan
from service.journal.base import Journal, JournalState
from service.journal.records import CheckpointRecord, CompletedRecord, PlannedRecord

log = logging.getLogger(__name__)
GRAPH_KEY = "graph"


class JournalLog:
    """The lifecycle's view of the journal: appends stamped with this driver's epoch."""

    def __init__(self, journal: Journal, epoch: int, graph_json: str, observe: Any = None) -> None:
        self.journal = journal
        self.epoch = epoch
        self._graph = json.loads(graph_json)
        self._graph_written = False
        self._observe = observe

    def journal_planned(self, plan: BatchPlan, fingerprint: str) -> None:
        extra = dict(plan.extra)
        if plan.layout is not None:
            extra[layout.JOURNAL_KEY] = plan.layout.to_json()
        if not self._graph_written:
            # The full graph goes with the epoch's first plan so a later mismatch can be explained.
            extra[GRAPH_KEY] = self._graph
        record = PlannedRecord(self.epoch, plan.batch_time, plan.ranges, fingerprint, extra)
        self._append(record)
        self._graph_written = True

    def journal_completed(
        self, batch_time: int, outputs: dict[str, int], skipped: Skipped, partitions: dict[str, int]
    ) -> None:
        record = CompletedRecord(self.epoch, batch_time, outputs, skipped, partitions)
        self._append(record)

    def journal_checkpoint(self, batch_time: int, refs: dict[str, str]) -> None:
        self._append(CheckpointRecord(self.epoch, batch_time, refs))

    def _append(self, record: Any) -> None:
        started = time.monotonic()
        self.journal.append(record)
        if self._observe is not None:
            self._observe(time.monotonic() - started)


@dataclass(frozen=True)
class RecoveryResult:
    epoch: int
    replayed_batches: int
    next_batch_time: int
    seconds: float
    recomputed_batches: int = 0
    """Completed batches after the checkpoint whose state was recomputed (no output rerun)."""
    fresh_start: bool = False
    """The journal held no planned batch: `next_batch_time` is the boundary just passed."""


def recover(
    ctx: StreamingContext, journal: Journal, lifecycle: BatchLifecycle, epoch: int
) -> RecoveryResult:
    """Steps 2–6 (the caller opened the journal and took `epoch`)."""
    started = time.monotonic()
    state = read_state(journal)
    rescale = Rescale(ctx, check_graph(state, ctx))
    restore_positions(state, ctx)
    rescale.before_recovery()
    recomputed = lifecycle.checkpoints.recover(state, epoch)
    replayed = replay_pending(state, lifecycle)
    rescale.after_replay()
    next_time = first_new_batch_time(state, ctx.batch_interval_ms)
    seconds = time.monotonic() - started
    log.info(
        "recovered: epoch %d, %d batches replayed, next batch %d (%.2fs)",
        epoch,
        replayed,
        next_time,
        seconds,
    )
    fresh = state.last_planned is None
    return RecoveryResult(epoch, replayed, next_time, seconds, recomputed, fresh)


def check_before_start(journal: Journal, ctx: StreamingContext) -> JournalState:
    """Steps 2–3 ahead of time, without an epoch: refuses a damaged journal or a changed graph
    before the driver starts Spark. The journal may not exist yet (a first start). Returns
    what it read, for `dstreams check` to describe."""
    started = time.monotonic()
    state = read_state(journal)
    check_graph(state, ctx)
    log.info("journal and graph checked (%.2fs)", time.monotonic() - started)
    return state


def read_state(journal: Journal) -> JournalState:
    state = JournalState.from_records(journal.read())
    state.validate()
    return state


def check_graph(state: JournalState, ctx: StreamingContext) -> dict[int, int]:
    """Refuses a graph other than the journal's, except for what recovery can carry over:
    returns the keyed states and windows whose partition count alone changed (stream id -> the
    journal's count; see `service.driver.rescale`)."""
    last = state.last_planned
    if last is None or last.graph_fingerprint == ctx.fingerprint():
        return {}
    if last.graph_fingerprint == ctx.fingerprint(with_key_placement=False):
        return {}  # journaled before dstreams recorded the key placement; the graph is the same
    old_graph = _journaled_graph(state)
    new_graph = json.loads(ctx.graph_json())
    if placement_change_is_harmless(old_graph, new_graph, state, ctx):
        return {}
    rescaled = state_rescales(old_graph, new_graph)
    if rescaled is not None:
        return rescaled
    changes = describe_graph_change(old_graph, new_graph)
    msg = (
        f"the job's graph changed since the journal was written (fingerprint "
        f"{last.graph_fingerprint} -> {ctx.fingerprint()}): {'; '.join(changes)}. "
        "Replaying journaled batches through a different graph would write different data "
        "under the same keys. Restore the previous job and configuration, or start the new "
        "graph under a new app id (and journal) so it begins afresh."
    )
    raise GraphChanged(msg)


def placement_change_is_harmless(
    old: dict[str, Any] | None, new: dict[str, Any], state: JournalState, ctx: StreamingContext
) -> bool:
    """Whether only the key placement changed, where nothing depends on it: no state (which is
    checkpointed by placement) and no unfinished batch (whose replay shuffles by it)."""
    if old is None or {**old, "key_placement": None} != {**new, "key_placement": None}:
        return False
    if ctx.stateful_streams() or state.pending():
        return False
    log.warning(
        "keys are placed differently from when the journal was written (%s -> %s); nothing "
        "journaled depends on it (no state, no unfinished batch), so the job goes on",
        old.get("key_placement"),
        new.get("key_placement"),
    )
    return True


def restore_positions(state: JournalState, ctx: StreamingContext) -> None:
    """Every source carries on after its journaled plans, oldest first."""
    plans = [journaled_plan(state.planned[t], ctx) for t in sorted(state.planned)]
    if not plans:
        return
    for source in ctx.inputs:
        source.resume([plan.source(source.name) for plan in plans])


def replay_pending(state: JournalState, lifecycle: BatchLifecycle) -> int:
    pending = state.pending()
    for record in pending:
        log.info("replaying batch %d planned by epoch %d", record.batch_time, record.epoch)
        lifecycle.replay(journaled_plan(record, lifecycle.ctx))
    return len(pending)


def journaled_plan(record: PlannedRecord, ctx: StreamingContext) -> BatchPlan:
    """The `BatchPlan` a journal record stores: its flat ranges and extra data split among the
    graph's sources again, each taking its own (`InputDStream.plan_from_journal`)."""
    ours = (GRAPH_KEY, layout.JOURNAL_KEY)
    extra = {k: v for k, v in record.extra.items() if k not in ours}
    plans = {s.name: s.plan_from_journal(record.ranges, extra) for s in ctx.inputs}
    journaled_layout = layout.TaskLayout.from_json(record.extra.get(layout.JOURNAL_KEY))
    return BatchPlan(record.batch_time, plans, journaled_layout)


def first_new_batch_time(state: JournalState, interval_ms: int, clock_ms: int | None = None) -> int:
    """A fresh start runs its first batch at once, as the interval boundary just passed: waiting
    for the next one would add up to an interval to every start-up. A restart carries on at the
    interval after the last planned batch, however long ago that was: every interval of the down
    time is a batch (due at once), so windows and timeouts see batch time without holes."""
    last = state.last_planned
    if last is None:
        return align_down(clock_ms if clock_ms is not None else now_ms(), interval_ms)
    return last.batch_time + interval_ms


def describe_graph_change(old: dict[str, Any] | None, new: dict[str, Any]) -> list[str]:
    """Human-readable differences between two graph descriptions (see `graph_json`)."""
    if old is None:
        return ["the journal does not hold the previous graph's description"]
    changes: list[str] = []
    if "key_placement" in old and old["key_placement"] != new.get("key_placement"):
        changes.append(
            f"keys are placed in partitions by {old['key_placement']!r}, now by "
            f"{new.get('key_placement')!r} (a new Python or PYTHONHASHSEED): the state and "
            "unfinished batches would be read from the wrong partitions; run the previous one"
        )
    old_outputs = {o["name"]: o for o in old.get("outputs", [])}
    new_outputs = {o["name"]: o for o in new.get("outputs", [])}
    changes += [
        f"output {name!r} was removed" for name in sorted(set(old_outputs) - set(new_outputs))
    ]
    changes += [
        f"output {name!r} was added" for name in sorted(set(new_outputs) - set(old_outputs))
    ]
    for name in sorted(set(old_outputs) & set(new_outputs)):
        if old_outputs[name] != new_outputs[name]:
            changes.append(
                f"output {name!r} changed from {old_outputs[name]} to {new_outputs[name]}"
            )
    old_streams = {s["id"]: s for s in old.get("streams", [])}
    for stream in new.get("streams", []):
        before = old_streams.get(stream["id"])
        if before is None:
            changes.append(f"stream {stream['id']} ({stream['kind']}) was added")
        elif before != stream:
            changes.append(_stream_change(before, stream))
    if len(new.get("streams", [])) < len(old_streams):
        changes.append(f"{len(old_streams) - len(new['streams'])} stream(s) were removed")
    return changes or ["the graphs differ in a way their descriptions do not show"]


def _stream_change(before: dict[str, Any], after: dict[str, Any]) -> str:
    old_parts = before.get("params", {}).get("partitions")
    new_parts = after.get("params", {}).get("partitions")
    if before["kind"] == after["kind"] and old_parts != new_parts:
        change = f"stream {after['id']} ({after['kind']}) partitions {old_parts} -> {new_parts}"
        if new_parts == "auto":  # a journal written when unset default_partitions meant 4
            change += f" (set default_partitions: {old_parts} to run the journal's layout)"
        return change
    return f"stream {after['id']} changed from {before['kind']} to {after['kind']}"


def _journaled_graph(state: JournalState) -> dict[str, Any] | None:
    for t in sorted(state.planned, reverse=True):
        graph = state.planned[t].extra.get(GRAPH_KEY)
        if isinstance(graph, dict):
            return graph
    return None
