"""The metrics catalogue (`metrics.toml`): every metric dstreams exposes, registered by name.

The declarations are data, kept in one file, so that there is one list of what dstreams exposes:
the code asks a `MetricSet` for a metric by its name, and the tests hold the chart's alerts and
dashboards to the same list. The driver's metrics and the ingest endpoint's each live in a
registry of their own (docs/architecture.md, "Observability"); the catalogue says which metrics
each registry holds.

>>> from prometheus_client import CollectorRegistry
>>> metrics = MetricSet(CollectorRegistry(), "driver")
>>> metrics.counter("dstreams_batches_total").labels("completed").inc()
"""

from __future__ import annotations

import functools
import tomllib
from dataclasses import dataclass
from importlib import resources
from typing import Any, Literal, TypeVar

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

Scope = Literal["driver", "ingest"]
_KINDS: dict[str, type[Counter | Gauge | Histogram]] = {
    "counter": Counter,
    "gauge": Gauge,
    "histogram": Histogram,
}
# Tables of the catalogue that hold metrics: one per registry, and those in both.
_SHARED = "shared"
_Metric = TypeVar("_Metric", Counter, Gauge, Histogram)


@dataclass(frozen=True)
class MetricSpec:
    """One metric as the catalogue declares it."""

    name: str
    kind: str
    help: str
    labels: tuple[str, ...] = ()
    buckets: tuple[float, ...] | None = None

    def register(self, registry: CollectorRegistry) -> Counter | Gauge | Histogram:
        if self.buckets is not None:
            return Histogram(
                self.name, self.help, self.labels, buckets=self.buckets, registry=registry
            )
        return _KINDS[self.kind](self.name, self.help, self.labels, registry=registry)


@functools.cache
def catalogue() -> dict[str, dict[str, MetricSpec]]:
    """`{table: {name: spec}}` for the tables `driver`, `ingest` and `shared`."""
    text = resources.files("service.observe").joinpath("metrics.toml").read_text("utf-8")
    document = tomllib.loads(text)
    buckets: dict[str, list[float]] = document.pop("buckets")
    return {
        table: {name: _spec(name, entry, buckets) for name, entry in metrics.items()}
        for table, metrics in document.items()
    }


def _spec(name: str, entry: dict[str, Any], buckets: dict[str, list[float]]) -> MetricSpec:
    kind = entry["kind"]
    if kind not in _KINDS or (kind == "histogram") != ("buckets" in entry):
        msg = f"metrics.toml: {name} has kind {kind!r}; expected counter, gauge or histogram, "
        msg += "and buckets for a histogram only"
        raise ValueError(msg)
    named = entry.get("buckets")
    return MetricSpec(
        name,
        kind,
        entry["help"],
        tuple(entry.get("labels", ())),
        None if named is None else tuple(float(b) for b in buckets[named]),
    )


class MetricSet:
    """The catalogue's metrics of one scope (its own table and the shared one), each registered
    in `registry` (never the global default one)."""

    def __init__(self, registry: CollectorRegistry, scope: Scope) -> None:
        tables = catalogue()
        specs = {**tables[_SHARED], **tables[scope]}
        self._metrics = {name: spec.register(registry) for name, spec in specs.items()}

    def counter(self, name: str) -> Counter:
        return self._get(name, Counter)

    def gauge(self, name: str) -> Gauge:
        return self._get(name, Gauge)

    def histogram(self, name: str) -> Histogram:
        return self._get(name, Histogram)

    def _get(self, name: str, kind: type[_Metric]) -> _Metric:
        metric = self._metrics.get(name)
        if not isinstance(metric, kind):
            msg = f"{name} is not a {kind.__name__.lower()} of this registry in metrics.toml"
            raise KeyError(msg)
        return metric


_WHERE = {"driver": "driver", "ingest": "ingest endpoint", _SHARED: "driver, ingest endpoint"}


def reference() -> str:
    """docs/metrics.md: every metric of the catalogue, as a table per registry."""
    lines = [
        "# Metrics",
        "",
        "Every metric dstreams exposes, made from `service/observe/metrics.toml` by",
        "`python -m service.observe.catalogue > docs/metrics.md` (a unit test keeps the two",
        "equal). Counters are exposed with their `_total` suffix; histograms as `_bucket`, `_sum`",
        "and `_count`. Process metrics (`process_*`, `python_*`) come on top.",
    ]
    for table, specs in catalogue().items():
        lines += ["", f"## {_WHERE[table]}", "", "| metric | kind | labels | meaning |"]
        lines.append("| --- | --- | --- | --- |")
        for spec in specs.values():
            labels = ", ".join(f"`{label}`" for label in spec.labels)
            lines.append(f"| `{spec.name}` | {spec.kind} | {labels} | {spec.help} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(reference(), end="")
