"""What the driver tells people: metrics, the status board, logs, readiness and rate control.

`Observer` implements the lifecycle's `BatchObserver` and fans each event out to Prometheus
metrics, the `/status` board and the log, and feeds the backpressure controller.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from service.config.settings import BackpressureSettings, Settings
from service.graph.base import BatchOutcome, OutputResult
from service.graph.counters import DecodeErrors, InputRecords, skipped_runs
from service.graph.outputs import DEAD_LETTER_SUFFIX
from service.graph.plan import BatchPlan
from service.observe import logs
from service.observe.backpressure import PidGains, RateController
from service.observe.event_time_metrics import event_time_figures
from service.observe.metrics import Metrics
from service.observe.status import StatusBoard

if TYPE_CHECKING:
    from service.graph.dstream import StatefulDStream
    from service.observe.http import HttpServer
    from service.observe.state_routes import StateQueries

log = logging.getLogger(__name__)
LAG_READ_EVERY_S = 1.0
"""How often the consumer lag is read while batches run late (it costs a broker round trip)."""
LagSource = Callable[[], dict[tuple[str, int], int]]


class Observer:
    """Fans batch events out to metrics, the status board, logs and rate control."""

    def __init__(
        self,
        app_id: str,
        batch_interval_ms: int,
        metrics: Metrics,
        board: StatusBoard,
        rate: RateController | None,
        http: tuple[str, int] | None,
        *,
        source_max_rates: Mapping[str, float | None] | None = None,
        dead_letter_topic: str | None = None,
    ) -> None:
        """`source_max_rates`: each source's max_rate_per_partition (None: unlimited)."""
        self.app_id = app_id
        self.metrics = metrics
        metrics.set_application(app_id, batch_interval_ms)
        self.board = board
        self.rate = rate
        self._http_address = http
        self._server: HttpServer | None = None
        self._ready_pending = False
        # Outputs whose sink is being waited for, and whether /readyz was ready before.
        self._outages: set[str] = set()
        self._ready_before_outage = False
        # Set once the job's graph is built, which happens after the HTTP endpoint is up.
        self.lag_source: LagSource | None = None
        # Offsets planning skipped (retention), per partition since start; see `_record_lost`.
        self.lost_source: LagSource | None = None
        # The graph's stateful streams, for event-time figures (watermarks); see engine.
        self.stateful_source: Callable[[], list[StatefulDStream]] | None = None
        # The queryable keyed states, answered at /state/... once the graph is built.
        self.state_queries: StateQueries | None = None
        self._lost_seen: dict[tuple[str, int], int] = {}
        self._lag_read_at = -LAG_READ_EVERY_S
        self._delays: dict[int, float] = {}
        self._started: dict[int, float] = {}
        self.dead_letter_topic = dead_letter_topic
        self.source_max_rates: dict[str, float | None] = dict(
            sorted((source_max_rates or {}).items())
        )

    # --- HTTP -----------------------------------------------------------------------------

    def start_http(self) -> int | None:
        if self._http_address is None:
            return None
        from service.observe.http import HttpServer

        host, port = self._http_address
        self._server = HttpServer(
            self.board, self.metrics, host, port, state_queries=lambda: self.state_queries
        )
        return self._server.start()

    def stop_http(self) -> None:
        if self._server is not None:
            self._server.stop()
            self._server = None

    # --- driver events --------------------------------------------------------------------

    def set_epoch(self, epoch: int) -> None:
        self.metrics.set_epoch(epoch)
        self.board.set_epoch(epoch)
        logs.set_epoch(epoch)

    def journal_appended(self, seconds: float) -> None:
        self.metrics.journal_appended(seconds)

    def phase(self, phase: str) -> None:
        """The driver entered `phase` (service.observe.status.PHASES), for `/startupz`."""
        self.board.set_phase(phase)
        log.info("driver phase: %s", phase)

    def recovered(self, seconds: float, replayed_batches: int) -> None:
        self.metrics.recovery_finished(seconds, replayed_batches)

    def checkpoint_written(
        self, batch_time: int, seconds: float, size: int, streams: dict[str, dict[str, int]]
    ) -> None:
        self.metrics.state.checkpoint_written(seconds, size, time.time(), streams)
        self.board.checkpoint_written(batch_time, seconds, size)

    def checkpoint_interval(self, seconds: float) -> None:
        """A stateful graph checkpoints every `seconds` of batches."""
        self.metrics.state.set_checkpoint_interval(seconds)

    def state_recomputed(self, batches: int) -> None:
        self.metrics.state.recomputed(batches)

    def ready_after_first_batch(self) -> None:
        """`/readyz` turns ready when the next batch completes (recovery is done by then)."""
        self._ready_pending = True

    # --- sink outages (service.driver.sink_outages) ------------------------------------------

    def sink_outage_began(self, output: str, reason: str) -> None:
        """Not ready while a batch waits for a sink's server."""
        if not self._outages:
            self._ready_before_outage = self.board.ready
        self._outages.add(output)
        self.metrics.sink_unreachable(output, True)
        self.board.set_ready(False, f"waiting for the sink of output {output}: {reason}")

    def sink_outage_waited(self, output: str, seconds: float) -> None:
        """Waiting is alive: the heartbeat goes on, so `/healthz` does not call it wedged."""
        self.metrics.sink_outage_waited(output, seconds)
        self.board.heartbeat()

    def sink_outage_ended(self, output: str) -> None:
        self._outages.discard(output)
        self.metrics.sink_unreachable(output, False)
        if not self._outages:
            ready = self._ready_before_outage
            self.board.set_ready(ready)

    def rate_for_next_batch(self) -> float | None:
        """Backpressure's per-partition rate for the next batch (None: the maxima alone).

        The rate in force for each source, the lower of its maximum and this one, is published
        as `dstreams_rate_limit_records_per_second`; a source with neither has no series.
        """
        limit = self.rate.rate_per_partition if self.rate is not None else None
        for name, maximum in self.source_max_rates.items():
            bounds = [rate for rate in (maximum, limit) if rate is not None]
            self.metrics.set_rate_limit(name, min(bounds) if bounds else None)
        return limit

    @contextmanager
    def batch_context(self, batch_time: int) -> Iterator[None]:
        with logs.batch_context(batch_time):
            self.board.heartbeat()
            yield

    # --- BatchObserver --------------------------------------------------------------------

    def batch_started(self, plan: BatchPlan, scheduling_delay_s: float) -> None:
        self._delays[plan.batch_time] = scheduling_delay_s
        self._started[plan.batch_time] = time.monotonic()
        self.board.batch_started(plan.batch_time, plan.ranges, scheduling_delay_s)

    def batch_finished(self, outcome: BatchOutcome) -> None:
        batch_time = outcome.plan.batch_time
        kind = "replayed" if outcome.replayed else "completed"
        self._record_metrics(outcome)
        self._record_event_time(batch_time)
        outputs = {result.name: result.rows for result in outcome.outputs}
        self.board.batch_finished(
            batch_time, outcome.input_records, outputs, outcome.processing_s, kind
        )
        self.board.batch_breakdown(batch_time, batch_breakdown(outcome))
        self.board.heartbeat()
        if self.rate is not None:
            partitions = sum(1 for r in outcome.plan.ranges if r.count)
            delay = self._delays.get(batch_time, 0.0)
            self.rate.update(outcome.input_records, outcome.processing_s, delay, max(1, partitions))
        self._delays.pop(batch_time, None)
        self._started.pop(batch_time, None)
        if self._ready_pending:
            self.board.set_ready(True)
            self._ready_pending = False
        log.info(
            "batch %d %s: %d records in, %s out, %.3fs (outputs' jobs: %s)",
            batch_time,
            kind,
            outcome.input_records,
            outputs,
            outcome.processing_s,
            ", ".join(f"{r.name} {r.seconds:.3f}s" for r in outcome.outputs),
        )

    def batch_failed(self, batch_time: int, error: BaseException) -> None:
        elapsed = time.monotonic() - self._started.pop(batch_time, time.monotonic())
        delay = self._delays.pop(batch_time, 0.0)
        self.metrics.batch_completed("failed", elapsed, delay, batch_time_ms=batch_time)
        self.board.batch_finished(batch_time, 0, {}, elapsed, "failed")
        log.error("batch %d failed: %s", batch_time, error)

    def _record_metrics(self, outcome: BatchOutcome) -> None:
        m = self.metrics
        batch_time = outcome.plan.batch_time
        m.batch_completed(
            "completed",
            outcome.processing_s,
            self._delays.get(batch_time, 0.0),
            batch_time_ms=batch_time,
        )
        for key, count in outcome.counters.items():
            match key:
                case InputRecords(topic, partition):
                    m.add_input_records(topic, partition, count)
                case DecodeErrors(topic):
                    m.add_decode_errors(topic, count)
        for result in outcome.outputs:
            m.add_output_records(result.name, result.rows)
            m.add_partition_writes(result.name, result.partitions, result.opened_clients)
            if self.dead_letter_topic and result.name.endswith(DEAD_LETTER_SUFFIX) and result.rows:
                m.add_dead_letters(self.dead_letter_topic, result.rows)
            if result.skipped_partitions:
                m.add_duplicate_writes_suppressed(result.name, result.skipped_partitions)
        self._record_lost(outcome)
        self._record_breakdown(outcome)
        self._record_lag(self._delays.get(batch_time, 0.0))

    def _record_lag(self, scheduling_delay_s: float) -> None:
        """The consumer lag (a round trip to the brokers): after every batch on time, at most
        every `LAG_READ_EVERY_S` while batches run late, e.g. the down-time batches after an
        outage, which run back to back."""
        now = time.monotonic()
        late = scheduling_delay_s > LAG_READ_EVERY_S
        if self.lag_source is None or (late and now - self._lag_read_at < LAG_READ_EVERY_S):
            return
        self._lag_read_at = now
        try:
            lags = self.lag_source()
        except Exception:  # a metric only: it must never fail a completed batch
            log.warning("could not read the consumer lag", exc_info=True)
            lags = {}
        for (topic, partition), lag in lags.items():
            self.metrics.set_consumer_lag(topic, partition, lag)

    def _record_breakdown(self, outcome: BatchOutcome) -> None:
        """`dstreams_batch_step_seconds` per step, `dstreams_end_to_end_latency_seconds` per
        output (from the batch's earliest record, so the oldest record's latency)."""
        m = self.metrics
        for step, seconds in outcome.steps.items():
            m.batch_step(step, seconds)
        stamps = outcome.record_timestamps
        for result in outcome.outputs:
            for job in result.jobs:
                m.batch_step("spark_job", job.seconds)
            if result.partitions:
                m.batch_step("sink_write", result.write_seconds)
                m.batch_step("sink_commit", result.commit_seconds)
            if stamps is not None and result.committed_at is not None and result.rows:
                m.end_to_end_latency(result.name, result.committed_at - stamps[0] / 1000)

    def _record_event_time(self, batch_time: int) -> None:
        """Watermarks and window figures of event-time streams, to metrics and the board."""
        if self.stateful_source is None:
            return
        watermarks = {}
        for stream, (action, figures) in event_time_figures(self.stateful_source()).items():
            self.metrics.event_time.record(stream, action, figures, batch_time)
            watermarks[stream] = (figures.watermark_ms, figures.open_windows)
        if watermarks:
            self.board.set_watermarks(batch_time, watermarks)

    def _record_lost(self, outcome: BatchOutcome) -> None:
        """`dstreams_lost_offsets_total`: offsets skipped when planning (the planner's running
        totals, counted by their growth) and when a replay read them (runs in the counters)."""
        for run in skipped_runs(outcome.counters):
            self.metrics.add_lost_offsets(run.topic, run.partition, run.count)
        totals = self.lost_source() if self.lost_source is not None else {}
        for (topic, partition), total in totals.items():
            grown = total - self._lost_seen.get((topic, partition), 0)
            if grown > 0:
                self.metrics.add_lost_offsets(topic, partition, grown)
            self._lost_seen[(topic, partition)] = total


def batch_breakdown(outcome: BatchOutcome) -> dict[str, Any]:
    """Where a batch's time went, for `/status` and the status page's timeline: seconds per
    lifecycle step, and per output its Spark jobs, slowest sink write, commit and end-to-end
    latency (from the latest and the earliest record timestamp to the commit)."""
    stamps = outcome.record_timestamps
    return {
        "steps": {step: round(seconds, 4) for step, seconds in outcome.steps.items()},
        "outputs": {result.name: _output_breakdown(result, stamps) for result in outcome.outputs},
    }


def _output_breakdown(result: OutputResult, stamps: tuple[int, int] | None) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "seconds": round(result.seconds, 4),
        "jobs": [job.to_json() for job in result.jobs],
        "write_s": round(result.write_seconds, 4),
        "commit_s": round(result.commit_seconds, 4),
        "opened_clients": result.opened_clients,
        "end_to_end_s": None,
    }
    if stamps is not None and result.committed_at is not None and result.rows:
        earliest, latest = stamps
        entry["end_to_end_s"] = {
            "min": round(result.committed_at - latest / 1000, 4),
            "max": round(result.committed_at - earliest / 1000, 4),
        }
    return entry


def make_observer(
    settings: Settings, heartbeat_source: Callable[[], float] | None = None
) -> Observer:
    """The driver's observer as `settings` describe it; configures logging on the way.

    `heartbeat_source` returns the scheduler's last tick (monotonic clock) for `/healthz`.
    """
    logs.configure_logging(settings.logging.format, settings.logging.level, settings.app_id)
    board = StatusBoard(
        settings.app_id,
        settings.batch_interval_ms,
        wedged_after_s=settings.http.unhealthy_after_s,
        heartbeat_source=heartbeat_source,
    )
    maxima = {name: source.max_rate_per_partition for name, source in settings.sources.items()}
    return Observer(
        settings.app_id,
        settings.batch_interval_ms,
        Metrics(),
        board,
        rate_controller(settings.backpressure, settings.batch_interval_ms, maxima),
        (settings.http.host, settings.http.port),
        source_max_rates=maxima,
        dead_letter_topic=settings.dead_letter.topic,
    )


def rate_controller(
    backpressure: BackpressureSettings,
    batch_interval_ms: int,
    source_max_rates: Mapping[str, float | None],
) -> RateController | None:
    """Backpressure's controller, or None when it is off.

    Its ceiling is the highest of the sources' maxima; a source without one leaves it unbounded.
    """
    if not backpressure.enabled:
        return None
    maxima = list(source_max_rates.values())
    ceiling = None if None in maxima else max((m for m in maxima if m is not None), default=None)
    gains = PidGains(backpressure.proportional, backpressure.integral, backpressure.derived)
    return RateController(
        batch_interval_ms,
        backpressure.min_rate,
        ceiling,
        gains,
        initial_rate=backpressure.initial_rate,
    )
