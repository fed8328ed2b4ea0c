"""The metrics catalogue: what it declares is what each registry exposes, and nothing else."""

from __future__ import annotations

from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from service.ingest.metrics import IngestMetrics
from service.observe.catalogue import MetricSet, MetricSpec, catalogue, reference
from service.observe.metrics import Metrics

pytestmark = pytest.mark.unit


def _families(registry: CollectorRegistry) -> dict[str, str]:
    return {family.name: family.type for family in registry.collect()}


@pytest.mark.parametrize(
    ("scope", "registry"),
    [
        ("driver", lambda: Metrics(process_metrics=False).registry),
        ("ingest", lambda: IngestMetrics(["lines"], process_metrics=False).registry),
    ],
)
def test_each_registry_holds_its_table_and_the_shared_one(scope: str, registry: object) -> None:
    tables = catalogue()
    declared = {**tables["shared"], **tables[scope]}
    exposed = _families(registry())  # type: ignore[operator]
    # prometheus_client names a counter's family without its `_total`.
    assert exposed == {spec.name.removesuffix("_total"): spec.kind for spec in declared.values()}


def test_names_follow_the_conventions() -> None:
    for table in catalogue().values():
        for spec in table.values():
            assert spec.name.startswith("dstreams_"), spec.name
            assert spec.name.endswith("_total") == (spec.kind == "counter"), spec.name
            assert spec.help.endswith("."), spec.name
            assert (spec.buckets is not None) == (spec.kind == "histogram"), spec.name
    assert not set(catalogue()["driver"]) & set(catalogue()["ingest"])


def test_asking_for_a_metric_the_registry_lacks_names_it() -> None:
    metrics = MetricSet(CollectorRegistry(), "ingest")
    with pytest.raises(KeyError, match="dstreams_batches_total is not a counter of this registry"):
        metrics.counter("dstreams_batches_total")
    with pytest.raises(KeyError, match="dstreams_ingest_ready is not a counter"):
        metrics.counter("dstreams_ingest_ready")  # a gauge
    assert metrics.gauge("dstreams_ingest_ready") is metrics.gauge("dstreams_ingest_ready")


def test_a_histogram_registers_its_named_buckets() -> None:
    registry = CollectorRegistry()
    spec = MetricSpec("dstreams_example_seconds", "histogram", "Examples.", (), (0.5, 2.0))
    spec.register(registry).observe(1.0)
    assert registry.get_sample_value("dstreams_example_seconds_bucket", {"le": "0.5"}) == 0
    assert registry.get_sample_value("dstreams_example_seconds_bucket", {"le": "2.0"}) == 1


def test_the_metrics_reference_is_made_from_the_catalogue() -> None:
    written = (Path(__file__).resolve().parents[2] / "docs" / "metrics.md").read_text()
    assert written == reference(), (
        "docs/metrics.md differs from the catalogue: run "
        "`.venv/bin/python -m service.observe.catalogue > docs/metrics.md`"
    )
