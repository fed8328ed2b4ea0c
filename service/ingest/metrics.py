"""Prometheus metrics of the ingest endpoint, in a registry of its own (served on its port).

The endpoint runs as its own process (`dstreams ingest`) or beside a driver; either way its
series are its own, so a driver's alerts (stalled batches, lag) never see an ingest process.
Labels are bounded: sources come from the configuration, outcomes from `OUTCOMES`.
"""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry

from service import __version__
from service.observe.catalogue import MetricSet
from service.observe.metrics import add_process_collectors

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


class IngestMetrics:
    """Every ingest metric, registered in `self.registry`."""

    def __init__(self, sources: list[str], *, process_metrics: bool = True) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        if process_metrics:
            add_process_collectors(self.registry)
        self._m = MetricSet(self.registry, "ingest")
        self._m.gauge("dstreams_build_info").labels(__version__).set(1)
        self._m.counter("dstreams_ingest_transactions_total")  # at 0 from the start
        for source in sources:  # every series at 0, so rate() works at once
            self._m.counter("dstreams_ingest_records_total").labels(source)
            self._m.counter("dstreams_ingest_duplicates_suppressed_total").labels(source)
            for outcome in OUTCOMES:
                self._m.counter("dstreams_ingest_requests_total").labels(source, outcome)

    def answered(self, source: str, outcome: str) -> None:
        if outcome not in OUTCOMES:
            msg = f"ingest outcome {outcome!r} is not one of {', '.join(OUTCOMES)}"
            raise ValueError(msg)
        self._m.counter("dstreams_ingest_requests_total").labels(source, outcome).inc()
        if outcome == "duplicate":
            self._m.counter("dstreams_ingest_duplicates_suppressed_total").labels(source).inc()

    def written(self, source: str, records: int, seconds: float) -> None:
        self._m.counter("dstreams_ingest_records_total").labels(source).inc(records)
        self._m.histogram("dstreams_ingest_ack_seconds").observe(seconds)

    def transaction_committed(self) -> None:
        self._m.counter("dstreams_ingest_transactions_total").inc()

    def set_in_flight(self, count: int) -> None:
        self._m.gauge("dstreams_ingest_in_flight_requests").set(count)

    def set_ready(self, ready: bool) -> None:
        self._m.gauge("dstreams_ingest_ready").set(1 if ready else 0)

    def watch_keys(self, count: Callable[[], int]) -> None:
        """The keys gauge reads `count()` at each scrape."""
        self._m.gauge("dstreams_ingest_idempotency_keys").set_function(count)

    def set_topic_under_replicated(self, topic: str, role: str, under: bool) -> None:
        self._m.gauge("dstreams_topic_under_replicated").labels(topic, role).set(1 if under else 0)
