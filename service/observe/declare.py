"""Declares Prometheus metrics in one registry, the way every dstreams metric is declared.

The driver's metrics, their state and event-time parts and the ingest endpoint's metrics each
live in a registry of their own (docs/architecture.md, "Observability"); declaring through one
object keeps that registry out of every declaration and the label names a plain list of words.

>>> from prometheus_client import CollectorRegistry
>>> declare = Declare(CollectorRegistry())
>>> declare.counter("example_total", "Examples, by kind.", "kind").labels("a").inc()
"""

from __future__ import annotations

from collections.abc import Sequence

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram


class Declare:
    """Registers each metric it declares in `registry` (never the global default one)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry

    def counter(self, name: str, help_text: str, *labels: str) -> Counter:
        return Counter(name, help_text, labels, registry=self.registry)

    def gauge(self, name: str, help_text: str, *labels: str) -> Gauge:
        return Gauge(name, help_text, labels, registry=self.registry)

    def histogram(
        self, name: str, help_text: str, buckets: Sequence[float], *labels: str
    ) -> Histogram:
        return Histogram(name, help_text, labels, buckets=buckets, registry=self.registry)
