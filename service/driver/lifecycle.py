"""The batch lifecycle: the exactly-once protocol of DESIGN.md §3, one named step each.

For batch time `t`:

1. `plan`: every source decides what `t` covers (Kafka: offset ranges within the rate budget).
2. `journal_planned`: the plan is appended to the journal and durable before any work runs.
3. `run_outputs`: one Spark job per output; task `p` writes `BatchKey(app, output, t, p)`
   idempotently, so a retried, speculative or replayed task collapses to one committed copy.
4. `commit_sinks`: the driver's idempotent `sink.commit(t)` for every output.
5. `journal_completed`: `completed(t)` is appended; a recovering driver will not replay `t`.
6. `acknowledge`: consumer-group offsets are committed to Kafka for lag tools only.

A replay (after a crash) starts at step 3 with the journaled plan imported into the sources.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from connectors.offsets import OffsetRange
from service import faults
from service.graph.context import StreamingContext
from service.graph.outputs import OutputResult
from service.graph.sources import parse_lost_counter_key

log = logging.getLogger(__name__)

Acknowledge = Callable[[list[OffsetRange]], None]


@dataclass(frozen=True)
class BatchPlan:
    """What batch `batch_time` covers: offset ranges plus other sources' JSON plan data."""

    batch_time: int
    ranges: tuple[OffsetRange, ...]
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class BatchOutcome:
    """What a batch did, for metrics, the status page and logs."""

    plan: BatchPlan
    outputs: tuple[OutputResult, ...]
    processing_s: float
    replayed: bool
    counters: dict[str, int] = field(default_factory=dict)

    @property
    def input_records(self) -> int:
        return self.counters.get("records", 0)

    @property
    def decode_errors(self) -> int:
        return self.counters.get("decode_errors", 0)


class BatchObserver(Protocol):
    def batch_started(self, plan: BatchPlan, scheduling_delay_s: float) -> None: ...

    def batch_finished(self, outcome: BatchOutcome) -> None: ...

    def batch_failed(self, batch_time: int, error: BaseException) -> None: ...


class JournalWriter(Protocol):
    """The part of the journal the lifecycle needs; see `service.journal`."""

    def journal_planned(self, plan: BatchPlan, fingerprint: str) -> None: ...

    def journal_completed(
        self, batch_time: int, outputs: dict[str, int], skipped: tuple[OffsetRange, ...] = ()
    ) -> None: ...


class NullObserver:
    def batch_started(self, plan: BatchPlan, scheduling_delay_s: float) -> None:
        """Observes nothing."""

    def batch_finished(self, outcome: BatchOutcome) -> None:
        """Observes nothing."""

    def batch_failed(self, batch_time: int, error: BaseException) -> None:
        """Observes nothing."""


class BatchLifecycle:
    """Runs batches of one `StreamingContext` through the six steps."""

    def __init__(
        self,
        ctx: StreamingContext,
        journal: JournalWriter | None,
        observer: BatchObserver | None = None,
        acknowledge: Acknowledge | None = None,
    ) -> None:
        self.ctx = ctx
        self.journal = journal
        self.observer: BatchObserver = observer or NullObserver()
        self.acknowledge_offsets = acknowledge
        self.fingerprint = ctx.fingerprint()

    def setup_outputs(self) -> None:
        for output in self.ctx.outputs:
            output.setup(self.ctx.app_id)

    def run_new(self, batch_time: int, scheduling_delay_s: float = 0.0) -> BatchOutcome:
        plan = self.plan(batch_time)
        self.journal_planned(plan)
        return self.execute(plan, scheduling_delay_s, replayed=False)

    def replay(self, plan: BatchPlan) -> BatchOutcome:
        """Re-runs a journaled but not completed batch with exactly its journaled plan."""
        for source in self.ctx.inputs:
            source.import_plan(plan.batch_time, list(plan.ranges), plan.extra)
        return self.execute(plan, 0.0, replayed=True)

    # --- the steps ------------------------------------------------------------------------

    def plan(self, batch_time: int) -> BatchPlan:
        ranges: list[OffsetRange] = []
        extra: dict[str, Any] = {}
        for source in self.ctx.inputs:
            source.plan(batch_time, self.ctx.batch_interval_ms)
            source_ranges, source_extra = source.export_plan(batch_time)
            ranges.extend(source_ranges)
            extra.update(source_extra)
        return BatchPlan(batch_time, tuple(ranges), extra)

    def journal_planned(self, plan: BatchPlan) -> None:
        if self.journal is not None:
            self.journal.journal_planned(plan, self.fingerprint)
        faults.crash_point("after-planned")

    def run_outputs(self, batch_time: int) -> list[OutputResult]:
        return [output.run(self.ctx.app_id, batch_time) for output in self.ctx.outputs]

    def commit_sinks(self, batch_time: int, results: list[OutputResult]) -> None:
        faults.crash_point("before-sink-commit")
        for output, result in zip(self.ctx.outputs, results, strict=True):
            output.commit(self.ctx.app_id, batch_time, result)

    def journal_completed(
        self,
        batch_time: int,
        results: list[OutputResult],
        skipped: tuple[OffsetRange, ...] = (),
    ) -> None:
        faults.crash_point("before-completed")
        if self.journal is not None:
            rows = {result.name: result.rows for result in results}
            self.journal.journal_completed(batch_time, rows, skipped)

    def acknowledge(self, plan: BatchPlan) -> None:
        faults.crash_point("before-ack")
        if self.acknowledge_offsets is not None and plan.ranges:
            try:
                self.acknowledge_offsets(list(plan.ranges))
            except Exception:  # lag tools only; never fails a batch
                log.warning("could not commit consumer-group offsets", exc_info=True)

    # --- composition ----------------------------------------------------------------------

    def execute(self, plan: BatchPlan, scheduling_delay_s: float, replayed: bool) -> BatchOutcome:
        batch_time = plan.batch_time
        self.observer.batch_started(plan, scheduling_delay_s)
        started = time.monotonic()
        before = self._counters()
        try:
            results = self.run_outputs(batch_time)
            self.commit_sinks(batch_time, results)
            self.journal_completed(batch_time, results, skipped_offsets(before, self._counters()))
        except BaseException as error:
            self.observer.batch_failed(batch_time, error)
            raise
        finally:
            self.ctx.forget(batch_time)
        self.acknowledge(plan)
        after = self._counters()
        outcome = BatchOutcome(
            plan=plan,
            outputs=tuple(results),
            processing_s=time.monotonic() - started,
            replayed=replayed,
            counters={k: v - before.get(k, 0) for k, v in after.items() if v != before.get(k, 0)},
        )
        self.observer.batch_finished(outcome)
        return outcome

    def _counters(self) -> dict[str, int]:
        counters = self.ctx.input_counters
        return dict(counters.value) if counters is not None else {}


def skipped_offsets(before: dict[str, int], after: dict[str, int]) -> tuple[OffsetRange, ...]:
    """The runs of deleted offsets this batch's reads skipped (fail_on_data_loss off)."""
    new_keys = [key for key, count in after.items() if count != before.get(key, 0)]
    return tuple(r for r in map(parse_lost_counter_key, new_keys) if r is not None)
