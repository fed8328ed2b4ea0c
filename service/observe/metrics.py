"""Prometheus metrics of a dstreams service, in a registry of its own.

The list and its conventions are in docs/architecture.md, "Observability".

Names carry the `dstreams_` prefix and base units (seconds, records); counters end in `_total`;
durations are histograms. Label values are bounded by the configuration: topics and partitions of
the sources, output names, source names, and a fixed set of batch outcomes.

The engine calls plain methods (`metrics.batch_completed("completed", 0.4, 0.01)`); the HTTP
server exposes `exposition()`. A registry per instance lets tests create as many as they like.
"""

from __future__ import annotations

import math

from prometheus_client import (
    CollectorRegistry,
    Gauge,
    GCCollector,
    PlatformCollector,
    ProcessCollector,
    generate_latest,
)

from service import __version__
from service.observe.declare import Declare
from service.observe.event_time_metrics import EventTimeMetrics
from service.observe.state_metrics import StateMetrics

BATCH_OUTCOMES = ("completed", "failed")
# From 5 ms (an empty batch) to 10 min (a batch far behind); batch intervals are usually 0.1-60 s.
DURATION_BUCKETS = (
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0,
)  # fmt: skip
# Batch steps: from a sub-millisecond plan to a Spark job of seconds.
STEP_BUCKETS = (
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0, 10.0,
    30.0, 60.0,
)  # fmt: skip
# End-to-end latency is a few batch intervals when healthy: fine steps around 0.5-5 s.
LATENCY_BUCKETS = (
    0.1, 0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 7.5, 10.0, 20.0, 30.0, 60.0,
    120.0, 300.0, 600.0,
)  # fmt: skip
# The parts of a batch `dstreams_batch_step_seconds` is labelled with: the lifecycle's steps
# (service/driver/lifecycle.py), each Spark job of an output, and the slowest task's sink write.
BATCH_STEPS = (
    "plan", "journal_planned", "run_outputs", "spark_job", "sink_write", "commit_sinks",
    "sink_commit", "journal_completed", "checkpoint", "acknowledge",
)  # fmt: skip
# A journal append is one fsync or one acks=all produce: milliseconds, seconds when unhealthy.
JOURNAL_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0)


def under_replicated_gauge(registry: CollectorRegistry) -> Gauge:
    """`dstreams_topic_under_replicated{topic, role}`: the start-up replication check's result,
    shared by the driver's and the ingest endpoint's registries."""
    return Declare(registry).gauge(
        "dstreams_topic_under_replicated",
        "1 when a topic has fewer replicas or a lower min.insync.replicas than "
        "kafka.min_replication_factor / kafka.min_insync_replicas at start-up, else 0.",
        "topic",
        "role",
    )


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
        declare = Declare(self.registry)
        self._declare_batch_metrics(declare)
        self._declare_breakdown_metrics(declare)
        self._declare_record_metrics(declare)
        self._declare_delivery_metrics(declare)
        self._declare_sink_client_metrics(declare)
        self._declare_driver_metrics(declare)
        self.state = StateMetrics(self.registry)
        self.event_time = EventTimeMetrics(self.registry)
        build_info = declare.gauge(
            "dstreams_build_info",
            "Always 1; the labels name the running dstreams build.",
            "version",
        )
        build_info.labels(version).set(1)

    def _declare_batch_metrics(self, declare: Declare) -> None:
        self._batches = declare.counter(
            "dstreams_batches_total", "Batches finished, by outcome.", "outcome"
        )
        for outcome in BATCH_OUTCOMES:
            self._batches.labels(outcome)  # exposed at 0 so rate() works from the first scrape
        self._processing = declare.histogram(
            "dstreams_batch_processing_seconds",
            "Time from a batch's start to its completion (compute, write, commit).",
            DURATION_BUCKETS,
        )
        self._scheduling_delay = declare.histogram(
            "dstreams_batch_scheduling_delay_seconds",
            "Time a batch waited after its batch time before it started.",
            DURATION_BUCKETS,
        )
        self._last_completed = declare.gauge(
            "dstreams_last_completed_batch_timestamp_seconds",
            "Batch time of the latest completed batch, in seconds since the Unix epoch.",
        )

    def _declare_breakdown_metrics(self, declare: Declare) -> None:
        self._steps = declare.histogram(
            "dstreams_batch_step_seconds",
            "Time a batch spent in one step: lifecycle steps, each Spark job of an output "
            "(spark_job), the slowest task's sink write (sink_write), each output's commit "
            "(sink_commit).",
            STEP_BUCKETS,
            "step",
        )
        self._end_to_end = declare.histogram(
            "dstreams_end_to_end_latency_seconds",
            "From the Kafka timestamp of a batch's earliest record to the output's sink commit "
            "(the batch's oldest record), by output.",
            LATENCY_BUCKETS,
            "output",
        )

    def _declare_record_metrics(self, declare: Declare) -> None:
        self._input = declare.counter(
            "dstreams_input_records_total",
            "Records read from Kafka, by topic and partition.",
            "topic",
            "partition",
        )
        self._output = declare.counter(
            "dstreams_output_records_total", "Records committed to sinks, by output name.", "output"
        )
        self._lag = declare.gauge(
            "dstreams_consumer_lag_records",
            "Latest offset minus the planned end of the latest batch, by topic and partition.",
            "topic",
            "partition",
        )

    def _declare_sink_client_metrics(self, declare: Declare) -> None:
        self._partition_writes = declare.counter(
            "dstreams_sink_partition_writes_total",
            "Partition-batches handed to a sink (committed or skipped), by output.",
            "output",
        )
        self._clients_opened = declare.counter(
            "dstreams_sink_clients_opened_total",
            "Partition-batches whose write set up a sink client first (a Kafka sink's "
            "transactional producer: init_transactions, fencing its previous holder), by output.",
            "output",
        )

        self._outage_seconds = declare.counter(
            "dstreams_sink_outage_seconds_total",
            "Seconds batches waited for a sink's server that was unreachable, by output.",
            "output",
        )
        self._outage_retries = declare.counter(
            "dstreams_sink_outage_retries_total",
            "Times the driver asked an unreachable sink's server again after a pause, by output.",
            "output",
        )
        self._sink_unreachable = declare.gauge(
            "dstreams_sink_unreachable",
            "1 while a batch waits for this output's sink server, else 0.",
            "output",
        )

    def _declare_delivery_metrics(self, declare: Declare) -> None:
        self._duplicates = declare.counter(
            "dstreams_duplicate_writes_suppressed_total",
            "Sink writes skipped because their batch key was already committed, by output.",
            "output",
        )
        self._dead_letters = declare.counter(
            "dstreams_dead_letters_total",
            "Records sent to the dead-letter topic, by source topic.",
            "topic",
        )
        self._decode_errors = declare.counter(
            "dstreams_decode_errors_total",
            "Records whose value could not be decoded, by topic.",
            "topic",
        )
        self._lost_offsets = declare.counter(
            "dstreams_lost_offsets_total",
            "Offsets deleted by retention before they were read (skipped), by topic and partition.",
            "topic",
            "partition",
        )
        self._rate_limit = declare.gauge(
            "dstreams_rate_limit_records_per_second",
            "Per-partition read rate in force (configured maximum or backpressure), by source.",
            "source",
        )

    def _declare_driver_metrics(self, declare: Declare) -> None:
        self._journal_append = declare.histogram(
            "dstreams_journal_append_seconds",
            "Time to append one record to the journal durably.",
            JOURNAL_BUCKETS,
        )
        # A gauge, not a histogram: recovery happens once per driver start, and the last
        # duration is what an operator asks about.
        self._recovery = declare.gauge(
            "dstreams_recovery_duration_seconds",
            "Duration of the latest recovery (journal read, replay of unfinished batches).",
        )
        self._replayed = declare.counter(
            "dstreams_replayed_batches_total",
            "Batches recomputed from their journaled offset ranges during recovery.",
        )
        self._epoch = declare.gauge(
            "dstreams_epoch", "Journal epoch held by this driver (fences older ones)."
        )
        # The application's pace and name as series, so that alerts count in batch intervals and
        # dashboards pick an application without knowing either from elsewhere.
        self._batch_interval = declare.gauge(
            "dstreams_batch_interval_seconds", "The batch interval (batch_interval_ms)."
        )
        self._app = declare.gauge(
            "dstreams_app_info", "Always 1; the label names the application (app_id).", "app"
        )
        self._under_replicated = under_replicated_gauge(self.registry)

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
        self._batches.labels(outcome).inc()
        self._processing.observe(processing_s)
        self._scheduling_delay.observe(scheduling_delay_s)
        if outcome == "completed" and batch_time_ms is not None:
            self._last_completed.set(batch_time_ms / 1000)

    def batch_step(self, step: str, seconds: float) -> None:
        """One batch spent `seconds` in `step` (one of BATCH_STEPS)."""
        if step not in BATCH_STEPS:
            msg = f"batch step {step!r} is not one of {', '.join(BATCH_STEPS)}"
            raise ValueError(msg)
        self._steps.labels(step).observe(seconds)

    def end_to_end_latency(self, output: str, seconds: float) -> None:
        """A batch's oldest record reached `output`'s commit `seconds` after its timestamp."""
        self._end_to_end.labels(output).observe(max(0.0, seconds))

    def set_last_completed_batch(self, batch_time_ms: int) -> None:
        """E.g. after recovery, from the journal's last `completed` record."""
        self._last_completed.set(batch_time_ms / 1000)

    # --- Records -------------------------------------------------------------------------------

    def add_input_records(self, topic: str, partition: int, count: int) -> None:
        self._input.labels(topic, str(partition)).inc(count)

    def add_output_records(self, output: str, count: int) -> None:
        self._output.labels(output).inc(count)

    def set_consumer_lag(self, topic: str, partition: int, lag: int) -> None:
        self._lag.labels(topic, str(partition)).set(lag)

    def add_duplicate_writes_suppressed(self, output: str, count: int = 1) -> None:
        self._duplicates.labels(output).inc(count)

    def add_partition_writes(self, output: str, partitions: int, opened_clients: int) -> None:
        self._partition_writes.labels(output).inc(partitions)
        self._clients_opened.labels(output).inc(opened_clients)

    def sink_unreachable(self, output: str, unreachable: bool) -> None:
        self._sink_unreachable.labels(output).set(1 if unreachable else 0)

    def sink_outage_waited(self, output: str, seconds: float) -> None:
        """One pause and retry of an output waiting for its sink's server."""
        self._outage_seconds.labels(output).inc(seconds)
        self._outage_retries.labels(output).inc()

    def add_dead_letters(self, topic: str, count: int = 1) -> None:
        self._dead_letters.labels(topic).inc(count)

    def add_decode_errors(self, topic: str, count: int = 1) -> None:
        self._decode_errors.labels(topic).inc(count)

    def add_lost_offsets(self, topic: str, partition: int, count: int) -> None:
        self._lost_offsets.labels(topic, str(partition)).inc(count)

    def set_rate_limit(self, source: str, records_per_s: float | None) -> None:
        """The per-partition rate in force; None (no limit) removes the series."""
        if records_per_s is None or math.isinf(records_per_s):
            self._rate_limit.remove(source)  # a no-op when the series does not exist
        else:
            self._rate_limit.labels(source).set(records_per_s)

    # --- Driver --------------------------------------------------------------------------------

    def journal_appended(self, seconds: float) -> None:
        self._journal_append.observe(seconds)

    def recovery_finished(self, seconds: float, replayed_batches: int) -> None:
        self._recovery.set(seconds)
        self._replayed.inc(replayed_batches)

    def set_epoch(self, epoch: int) -> None:
        self._epoch.set(epoch)

    def set_application(self, app_id: str, batch_interval_ms: int) -> None:
        """Names the application and its batch interval (`dstreams_app_info`, the interval)."""
        self._app.labels(app_id).set(1)
        self._batch_interval.set(batch_interval_ms / 1000)

    def set_topic_under_replicated(self, topic: str, role: str, under: bool) -> None:
        self._under_replicated.labels(topic, role).set(1 if under else 0)

    def exposition(self) -> bytes:
        """The registry in Prometheus text format 0.0.4."""
        return generate_latest(self.registry)
