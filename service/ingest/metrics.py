"""Prometheus metrics of the ingest endpoint, in a registry of its own (served on its port).

The endpoint runs as its own process (`dstreams ingest`) or beside a driver; either way its
series are its own, so a driver's alerts (stalled batches, lag) never see an ingest process.
Labels are bounded: sources come from the configuration, outcomes from `OUTCOMES`.
"""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry

from service import __version__
from service.observe.declare import Declare
from service.observe.metrics import add_process_collectors, under_replicated_gauge

OUTCOMES = (
    "written",  # 200: acknowledged by the in-sync replicas
    "duplicate",  # 200: the idempotency key was already written; nothing written again
    "rejected",  # 400, 401, 403, 404, 405, 408, 411, 415, 422: wrong as it is
    "too_large",  # 413
    "conflict",  # 409 (same key in progress), 422 (key reused for another request)
    "throttled",  # 429: the idempotency keys' bound is reached
    "unavailable",  # 503: not acknowledged (replicas, brokers), overloaded or stopping
    "error",  # 500
)
UNKNOWN_SOURCE = "(unknown)"
# From 2 ms (an idle cluster) to the default ack timeout and beyond.
ACK_BUCKETS = (0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class IngestMetrics:
    """Every ingest metric, registered in `self.registry`."""

    def __init__(self, sources: list[str], *, process_metrics: bool = True) -> None:
        self.registry = r = CollectorRegistry(auto_describe=True)
        if process_metrics:
            add_process_collectors(r)
        declare = Declare(r)
        self._requests = declare.counter(
            "dstreams_ingest_requests_total",
            "Ingest requests answered, by source and outcome.",
            "source",
            "outcome",
        )
        self._records = declare.counter(
            "dstreams_ingest_records_total",
            "Records acknowledged by the in-sync replicas, by source.",
            "source",
        )
        self._duplicates = declare.counter(
            "dstreams_ingest_duplicates_suppressed_total",
            "Requests answered from their idempotency key without writing again, by source.",
            "source",
        )
        self._declare_state_metrics(declare)
        self._under_replicated = under_replicated_gauge(r)
        info = declare.gauge(
            "dstreams_build_info", "Always 1; the labels name the build.", "version"
        )
        info.labels(__version__).set(1)
        for source in sources:
            self._records.labels(source)
            self._duplicates.labels(source)
            for outcome in OUTCOMES:
                self._requests.labels(source, outcome)  # at 0, so rate() works at once

    def _declare_state_metrics(self, declare: Declare) -> None:
        self._ack = declare.histogram(
            "dstreams_ingest_ack_seconds",
            "Time from a request's submission to its acknowledgement by the in-sync replicas.",
            ACK_BUCKETS,
        )
        self._in_flight = declare.gauge(
            "dstreams_ingest_in_flight_requests",
            "Requests being read or waiting for acknowledgement.",
        )
        self._ready = declare.gauge(
            "dstreams_ingest_ready",
            "1 while requests are taken (producer ready, idempotency keys loaded), else 0.",
        )
        self._keys = declare.gauge(
            "dstreams_ingest_idempotency_keys",
            "Idempotency keys remembered (acknowledged within ingest.key_retention_ms).",
        )

    def answered(self, source: str, outcome: str) -> None:
        if outcome not in OUTCOMES:
            msg = f"ingest outcome {outcome!r} is not one of {', '.join(OUTCOMES)}"
            raise ValueError(msg)
        self._requests.labels(source, outcome).inc()
        if outcome == "duplicate":
            self._duplicates.labels(source).inc()

    def written(self, source: str, records: int, seconds: float) -> None:
        self._records.labels(source).inc(records)
        self._ack.observe(seconds)

    def set_in_flight(self, count: int) -> None:
        self._in_flight.set(count)

    def set_ready(self, ready: bool) -> None:
        self._ready.set(1 if ready else 0)

    def watch_keys(self, count: Callable[[], int]) -> None:
        """The keys gauge reads `count()` at each scrape."""
        self._keys.set_function(count)

    def set_topic_under_replicated(self, topic: str, role: str, under: bool) -> None:
        self._under_replicated.labels(topic, role).set(1 if under else 0)
