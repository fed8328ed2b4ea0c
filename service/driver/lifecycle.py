"""The batch lifecycle (docs/architecture.md, The batch lifecycle), one named step each.

For batch time `t`:

1. `plan`: every source decides what `t` covers (Kafka: offset ranges within the rate budget).
2. `journal_planned`: the plan is appended to the journal and durable before any work runs.
3. `run_outputs`: one Spark job per output; task `p` writes `BatchKey(app, output, t, p)`
   idempotently, so a retried, speculative or replayed task collapses to one committed copy.
4. `commit_sinks`: the driver's idempotent `sink.commit(t)` for every output.
5. `journal_completed`: `completed(t)` is appended; a recovering driver will not replay `t`.
6. `acknowledge`: consumer-group offsets are committed to Kafka for lag tools only (skipped
   when no offset moved since the last commit, as in a run of empty batches).
7. `checkpoints.after_completed`: every N batches, a stateful graph's state is checkpointed
   (see `service.driver.checkpoints`); it runs right after step 5.

Once a batch is completed (and checkpointed), its queryable keyed states are published to live
state queries (`service.graph.queryable`); a batch that fails is never published.

Steps 3 and 4 (and each output's setup) run through `outages`: a sink whose server is down is
waited for, with backoff and up to its limit, and the step runs again
(`service.driver.sink_outages`).

The plan is a value (`service.graph.plan.BatchPlan`) passed down every step; no source keeps a
copy. A replay (after a crash) starts at step 3 with the plan rebuilt from the journal.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import replace
from functools import partial
from typing import Protocol

from connectors.offsets import OffsetRange, Skipped
from service import faults
from service.driver.sink_outages import RunDirectly, SinkOutages
from service.driver.steps import StepTimer
from service.graph.base import BatchOutcome, OutputResult
from service.graph.context import StreamingContext
from service.graph.counters import Counts, is_timestamp, skipped_runs
from service.graph.layout import choose_layout
from service.graph.plan import BatchPlan
from service.journal.base import JournalState

__all__ = [
    "Acknowledge",
    "BatchLifecycle",
    "BatchObserver",
    "BatchOutcome",
    "BatchPlan",
    "JournalWriter",
    "NoCheckpoints",
    "NullObserver",
    "StateCheckpointer",
]

log = logging.getLogger(__name__)

Acknowledge = Callable[[BatchPlan], None]


class BatchObserver(Protocol):
    def batch_started(self, plan: BatchPlan, scheduling_delay_s: float) -> None: ...

    def batch_finished(self, outcome: BatchOutcome) -> None: ...

    def batch_failed(self, batch_time: int, error: BaseException) -> None: ...


class JournalWriter(Protocol):
    """The part of the journal the lifecycle needs; see `service.journal`."""

    def journal_planned(self, plan: BatchPlan, fingerprint: str) -> None: ...

    def journal_completed(
        self, batch_time: int, outputs: dict[str, int], skipped: Skipped, partitions: dict[str, int]
    ) -> None: ...


class StateCheckpointer(Protocol):
    """Step 7 (see `service.driver.checkpoints`): checkpoints after completed batches, and the
    state half of recovery."""

    def after_completed(self, batch_time: int) -> None: ...

    def recover(self, state: JournalState, epoch: int) -> int: ...


class NoCheckpoints:
    """For graphs run without a checkpoint store (tests of stateless graphs)."""

    def after_completed(self, batch_time: int) -> None:
        """Nothing to checkpoint."""

    def recover(self, state: JournalState, epoch: int) -> int:
        return 0


class NullObserver:
    def batch_started(self, plan: BatchPlan, scheduling_delay_s: float) -> None:
        """Observes nothing."""

    def batch_finished(self, outcome: BatchOutcome) -> None:
        """Observes nothing."""

    def batch_failed(self, batch_time: int, error: BaseException) -> None:
        """Observes nothing."""


class BatchLifecycle:
    """Runs batches of one `StreamingContext` through the seven steps."""

    def __init__(
        self,
        ctx: StreamingContext,
        journal: JournalWriter | None,
        observer: BatchObserver | None = None,
        acknowledge: Acknowledge | None = None,
        checkpoints: StateCheckpointer | None = None,
        outages: SinkOutages | RunDirectly | None = None,
    ) -> None:
        self.ctx = ctx
        self.outages = outages or RunDirectly()
        self.journal = journal
        self.observer: BatchObserver = observer or NullObserver()
        self.acknowledge_offsets = acknowledge
        self.checkpoints: StateCheckpointer = checkpoints or NoCheckpoints()
        self.fingerprint = ctx.fingerprint()
        self.batches_begun = 0
        """Batches (replayed or new) this lifecycle has started: from the first, a failure is
        one of a running service, no longer a refusal to start."""
        self._acknowledged: frozenset[tuple[str, int, int]] | None = None

    def setup_outputs(self) -> None:
        for output in self.ctx.outputs:
            self.outages.run(output, partial(output.setup, self.ctx.app_id))

    def run_new(
        self, batch_time: int, scheduling_delay_s: float = 0.0, rate: float | None = None
    ) -> BatchOutcome:
        """Plans, journals and runs a new batch; `rate` is backpressure's records/s per
        partition for it (None: each source's maximum alone)."""
        steps = StepTimer()
        with steps.step("plan"):
            plan = self.plan(batch_time, rate)
        with steps.step("journal_planned"):
            self.journal_planned(plan)
        return self.execute(plan, scheduling_delay_s, replayed=False, steps=steps)

    def replay(self, plan: BatchPlan) -> BatchOutcome:
        """Re-runs a journaled but not completed batch with exactly its journaled plan."""
        return self.execute(plan, 0.0, replayed=True)

    # --- the steps ------------------------------------------------------------------------

    def plan(self, batch_time: int, rate: float | None = None) -> BatchPlan:
        interval = self.ctx.batch_interval_ms
        plans = {source.name: source.plan(batch_time, interval, rate) for source in self.ctx.inputs}
        layout = None
        if self.ctx.auto_layout:
            records = sum(plan.offsets for plan in plans.values())
            layout = choose_layout(records, self.ctx.sc.defaultParallelism)
        return BatchPlan(batch_time, plans, layout)

    def journal_planned(self, plan: BatchPlan) -> None:
        if self.journal is not None:
            self.journal.journal_planned(plan, self.fingerprint)
        faults.crash_point("after-planned")

    def run_outputs(self, plan: BatchPlan) -> list[OutputResult]:
        self.ctx.step_stateful(plan)
        app = self.ctx.app_id
        return [
            self.outages.run(output, partial(output.run, app, plan)) for output in self.ctx.outputs
        ]

    def commit_sinks(self, batch_time: int, results: list[OutputResult]) -> list[OutputResult]:
        """Commits every output; returns the results with each commit's duration and time."""
        faults.crash_point("before-sink-commit")
        committed = []
        for output, result in zip(self.ctx.outputs, results, strict=True):
            started = time.monotonic()
            self.outages.run(output, partial(output.commit, self.ctx.app_id, batch_time, result))
            seconds = time.monotonic() - started
            committed.append(replace(result, commit_seconds=seconds, committed_at=time.time()))
        return committed

    def journal_completed(
        self,
        batch_time: int,
        results: list[OutputResult],
        skipped: Skipped = (),
    ) -> None:
        faults.crash_point("before-completed")
        if self.journal is not None:
            rows = {result.name: result.rows for result in results}
            # Each output's task count: the number of sink markers the audit expects.
            partitions = {result.name: result.partitions for result in results}
            self.journal.journal_completed(batch_time, rows, skipped, partitions)

    def acknowledge(self, plan: BatchPlan) -> None:
        faults.crash_point("before-ack")
        ends = frozenset((r.topic, r.partition, r.until_offset) for r in plan.ranges)
        if self.acknowledge_offsets is None or not ends or ends == self._acknowledged:
            return
        try:
            self.acknowledge_offsets(plan)
            self._acknowledged = ends
        except Exception:  # lag tools only; never fails a batch
            log.warning("could not commit consumer-group offsets", exc_info=True)

    # --- composition ----------------------------------------------------------------------

    def execute(
        self,
        plan: BatchPlan,
        scheduling_delay_s: float,
        replayed: bool,
        steps: StepTimer | None = None,
    ) -> BatchOutcome:
        batch_time = plan.batch_time
        steps = steps or StepTimer()
        self.batches_begun += 1
        self.observer.batch_started(plan, scheduling_delay_s)
        started = time.monotonic()
        before = self._counters()
        try:
            results = self._run_to_completed(plan, steps, before)
            # Completed (and checkpointed): live state queries answer from this batch's state
            # now, published before `forget` lets the states release the RDDs it replaces.
            self.ctx.queries.publish(batch_time)
        except BaseException as error:
            self._forget_timestamps()
            self.observer.batch_failed(batch_time, error)
            raise
        finally:
            self.ctx.forget(batch_time)
        with steps.step("acknowledge"):
            self.acknowledge(plan)
        after = self._counters()
        self._forget_timestamps()
        outcome = BatchOutcome(
            plan=plan,
            outputs=tuple(results),
            processing_s=time.monotonic() - started,
            replayed=replayed,
            counters={k: v - before.get(k, 0) for k, v in after.items() if v != before.get(k, 0)},
            steps=steps.seconds,
        )
        self.observer.batch_finished(outcome)
        return outcome

    def _run_to_completed(
        self, plan: BatchPlan, steps: StepTimer, before: Counts
    ) -> list[OutputResult]:
        """Steps 3 to 5 (and 7), each timed."""
        with steps.step("run_outputs"):
            results = self.run_outputs(plan)
        with steps.step("commit_sinks"):
            results = self.commit_sinks(plan.batch_time, results)
        with steps.step("journal_completed"):
            skipped = skipped_offsets(before, self._counters())
            self.journal_completed(plan.batch_time, results, skipped)
        with steps.step("checkpoint"):
            self.checkpoints.after_completed(plan.batch_time)
        return results

    def _counters(self) -> Counts:
        counters = self.ctx.input_counters
        return dict(counters.value) if counters is not None else {}

    def _forget_timestamps(self) -> None:
        """Record timestamps describe one batch (`service.graph.counters.EarliestTimestamp`):
        take them out of the running totals once the batch has been reported."""
        counters = self.ctx.input_counters
        if counters is not None:
            counters.value = {k: v for k, v in counters.value.items() if not is_timestamp(k)}


def skipped_offsets(before: Counts, after: Counts) -> Skipped:
    """The runs of deleted offsets this batch's reads skipped (fail_on_data_loss off)."""
    new = {key: n for key, n in after.items() if n != before.get(key, 0)}
    return tuple(
        OffsetRange(run.topic, run.partition, run.from_offset, run.until_offset)
        for run in skipped_runs(new)
    )
