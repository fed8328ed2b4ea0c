"""Prometheus metrics of a dstreams service, in a registry of its own.

The metrics themselves (kind, help, labels, buckets) are declared in `metrics.toml`
(`service.observe.catalogue`); their conventions are in docs/architecture.md, "Observability".

The engine calls plain methods (`metrics.batch_completed("completed", 0.4, 0.01)`); the HTTP
server exposes `exposition()`. A registry per instance lets tests create as many as they like.
"""

from __future__ import annotations

import math

from prometheus_client import (
    CollectorRegistry,
    GCCollector,
    PlatformCollector,
    ProcessCollector,
    generate_latest,
)

from service import __version__
from service.observe.catalogue import MetricSet
from service.observe.event_time_metrics import EventTimeMetrics
from service.observe.state_metrics import StateMetrics

BATCH_OUTCOMES = ("completed", "failed")
# The parts of a batch `dstreams_batch_step_seconds` is labelled with: the lifecycle's steps
# (service/driver/lifecycle.py), each Spark job of an output, and the slowest task's sink write.
BATCH_STEPS = (
    "plan", "journal_planned", "run_outputs", "spark_job", "sink_write", "commit_sinks",
    "sink_commit", "journal_completed", "checkpoint", "acknowledge",
)  # fmt: skip


def add_process_collectors(registry: CollectorRegistry) -> None:
    """process_* (CPU, memory, fds), python_info and python_gc_*, as in the default registry."""
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    GCCollector(registry=registry)


class Metrics:
    """Every dstreams metric, registered in `self.registry` (never the global default one)."""

    def __init__(self, version: str = __version__, *, process_metrics: bool = True) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        if process_metrics:
            add_process_collectors(self.registry)
        self._m = MetricSet(self.registry, "driver")
        self.state = StateMetrics(self._m)
        self.event_time = EventTimeMetrics(self._m)
        self._m.gauge("dstreams_build_info").labels(version).set(1)
        for outcome in BATCH_OUTCOMES:  # exposed at 0 so rate() works from the first scrape
            self._m.counter("dstreams_batches_total").labels(outcome)

    # --- Batches -------------------------------------------------------------------------------

    def batch_completed(
        self,
        outcome: str,
        processing_s: float,
        scheduling_delay_s: float,
        *,
        batch_time_ms: int | None = None,
    ) -> None:
        """A batch finished with `outcome` (one of BATCH_OUTCOMES)."""
        if outcome not in BATCH_OUTCOMES:
            msg = f"batch outcome {outcome!r} is not one of {', '.join(BATCH_OUTCOMES)}"
            raise ValueError(msg)
        self._m.counter("dstreams_batches_total").labels(outcome).inc()
        self._m.histogram("dstreams_batch_processing_seconds").observe(processing_s)
        self._m.histogram("dstreams_batch_scheduling_delay_seconds").observe(scheduling_delay_s)
        if outcome == "completed" and batch_time_ms is not None:
            self._m.gauge("dstreams_last_completed_batch_timestamp_seconds").set(
                batch_time_ms / 1000
            )

    def batch_step(self, step: str, seconds: float) -> None:
        """One batch spent `seconds` in `step` (one of BATCH_STEPS)."""
        if step not in BATCH_STEPS:
            msg = f"batch step {step!r} is not one of {', '.join(BATCH_STEPS)}"
            raise ValueError(msg)
        self._m.histogram("dstreams_batch_step_seconds").labels(step).observe(seconds)

    def end_to_end_latency(self, output: str, seconds: float) -> None:
        """A batch's oldest record reached `output`'s commit `seconds` after its timestamp."""
        self._m.histogram("dstreams_end_to_end_latency_seconds").labels(output).observe(
            max(0.0, seconds)
        )

    def set_last_completed_batch(self, batch_time_ms: int) -> None:
        """E.g. after recovery, from the journal's last `completed` record."""
        self._m.gauge("dstreams_last_completed_batch_timestamp_seconds").set(batch_time_ms / 1000)

    # --- Records -------------------------------------------------------------------------------

    def add_input_records(self, topic: str, partition: int, count: int) -> None:
        self._m.counter("dstreams_input_records_total").labels(topic, str(partition)).inc(count)

    def add_output_records(self, output: str, count: int) -> None:
        self._m.counter("dstreams_output_records_total").labels(output).inc(count)

    def set_consumer_lag(self, topic: str, partition: int, lag: int) -> None:
        self._m.gauge("dstreams_consumer_lag_records").labels(topic, str(partition)).set(lag)

    def add_duplicate_writes_suppressed(self, output: str, count: int = 1) -> None:
        self._m.counter("dstreams_duplicate_writes_suppressed_total").labels(output).inc(count)

    def add_partition_writes(self, output: str, partitions: int, opened_clients: int) -> None:
        self._m.counter("dstreams_sink_partition_writes_total").labels(output).inc(partitions)
        self._m.counter("dstreams_sink_clients_opened_total").labels(output).inc(opened_clients)

    def sink_unreachable(self, output: str, unreachable: bool) -> None:
        self._m.gauge("dstreams_sink_unreachable").labels(output).set(1 if unreachable else 0)

    def sink_outage_waited(self, output: str, seconds: float) -> None:
        """One pause and retry of an output waiting for its sink's server."""
        self._m.counter("dstreams_sink_outage_seconds_total").labels(output).inc(seconds)
        self._m.counter("dstreams_sink_outage_retries_total").labels(output).inc()

    def add_dead_letters(self, topic: str, count: int = 1) -> None:
        self._m.counter("dstreams_dead_letters_total").labels(topic).inc(count)

    def add_decode_errors(self, topic: str, count: int = 1) -> None:
        self._m.counter("dstreams_decode_errors_total").labels(topic).inc(count)

    def add_lost_offsets(self, topic: str, partition: int, count: int) -> None:
        self._m.counter("dstreams_lost_offsets_total").labels(topic, str(partition)).inc(count)

    def set_rate_limit(self, source: str, records_per_s: float | None) -> None:
        """The per-partition rate in force; None (no limit) removes the series."""
        if records_per_s is None or math.isinf(records_per_s):
            self._m.gauge("dstreams_rate_limit_records_per_second").remove(
                source
            )  # a no-op when the series does not exist
        else:
            self._m.gauge("dstreams_rate_limit_records_per_second").labels(source).set(
                records_per_s
            )

    # --- Driver --------------------------------------------------------------------------------

    def journal_appended(self, seconds: float) -> None:
        self._m.histogram("dstreams_journal_append_seconds").observe(seconds)

    def recovery_finished(self, seconds: float, replayed_batches: int) -> None:
        self._m.gauge("dstreams_recovery_duration_seconds").set(seconds)
        self._m.counter("dstreams_replayed_batches_total").inc(replayed_batches)

    def set_epoch(self, epoch: int) -> None:
        self._m.gauge("dstreams_epoch").set(epoch)

    def set_application(self, app_id: str, batch_interval_ms: int) -> None:
        """Names the application and its batch interval (`dstreams_app_info`, the interval)."""
        self._m.gauge("dstreams_app_info").labels(app_id).set(1)
        self._m.gauge("dstreams_batch_interval_seconds").set(batch_interval_ms / 1000)

    def set_topic_under_replicated(self, topic: str, role: str, under: bool) -> None:
        self._m.gauge("dstreams_topic_under_replicated").labels(topic, role).set(1 if under else 0)

    def exposition(self) -> bytes:
        """The registry in Prometheus text format 0.0.4."""
        return generate_latest(self.registry)
