"""The Metrics facade: names, units, labels and the values the engine's calls produce."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from service import __version__
from service.config.settings import load_settings
from service.driver.engine import checkpoint_interval_batches
from service.observe.metrics import Metrics
from service.observe.observer import Observer
from service.observe.status import StatusBoard

EXPECTED = {
    # family name (as the parser reports it) -> type
    "dstreams_batches": "counter",
    "dstreams_batch_processing_seconds": "histogram",
    "dstreams_batch_scheduling_delay_seconds": "histogram",
    "dstreams_batch_step_seconds": "histogram",
    "dstreams_end_to_end_latency_seconds": "histogram",
    "dstreams_last_completed_batch_timestamp_seconds": "gauge",
    "dstreams_input_records": "counter",
    "dstreams_output_records": "counter",
    "dstreams_consumer_lag_records": "gauge",
    "dstreams_duplicate_writes_suppressed": "counter",
    "dstreams_sink_partition_writes": "counter",
    "dstreams_sink_clients_opened": "counter",
    "dstreams_sink_outage_seconds": "counter",
    "dstreams_sink_outage_retries": "counter",
    "dstreams_sink_unreachable": "gauge",
    "dstreams_dead_letters": "counter",
    "dstreams_decode_errors": "counter",
    "dstreams_lost_offsets": "counter",
    "dstreams_rate_limit_records_per_second": "gauge",
    "dstreams_journal_append_seconds": "histogram",
    "dstreams_recovery_duration_seconds": "gauge",
    "dstreams_replayed_batches": "counter",
    "dstreams_epoch": "gauge",
    "dstreams_topic_under_replicated": "gauge",
    "dstreams_build_info": "gauge",
    "dstreams_checkpoint_seconds": "histogram",
    "dstreams_checkpoint_bytes": "histogram",
    "dstreams_last_checkpoint_timestamp_seconds": "gauge",
    "dstreams_state_keys": "gauge",
    "dstreams_event_watermark_timestamp_seconds": "gauge",
    "dstreams_event_watermark_lag_seconds": "gauge",
    "dstreams_event_open_windows": "gauge",
    "dstreams_event_windows_emitted": "counter",
    "dstreams_event_corrections": "counter",
    "dstreams_event_late_records": "counter",
    "dstreams_state_bytes": "gauge",
    "dstreams_recovery_recomputed_batches": "counter",
    "dstreams_batch_interval_seconds": "gauge",
    "dstreams_app_info": "gauge",
    "dstreams_checkpoint_interval_seconds": "gauge",
}


def exercise(metrics: Metrics) -> None:
    metrics.batch_completed("completed", 0.4, 0.02, batch_time_ms=1_700_000_001_000)
    metrics.batch_completed("failed", 2.0, 0.5)
    metrics.add_input_records("words", 0, 10)
    metrics.add_input_records("words", 1, 5)
    metrics.add_output_records("counts", 7)
    metrics.set_consumer_lag("words", 0, 42)
    metrics.add_duplicate_writes_suppressed("counts", 2)
    metrics.add_partition_writes("counts", 4, 1)
    metrics.add_dead_letters("words")
    metrics.add_decode_errors("words", 3)
    metrics.add_lost_offsets("words", 1, 100)
    metrics.set_rate_limit("lines", 250.0)
    metrics.journal_appended(0.003)
    metrics.recovery_finished(1.25, 4)
    metrics.set_epoch(9)
    metrics.set_topic_under_replicated("words", "input", True)
    metrics.state.checkpoint_written(0.5, 4096, 1_700_000_002.0, {"s3": {"keys": 12, "bytes": 90}})
    metrics.state.recomputed(3)
    metrics.batch_step("spark_job", 0.3)
    metrics.batch_step("spark_job", 0.2)
    metrics.batch_step("plan", 0.002)
    metrics.end_to_end_latency("counts", 1.4)
    metrics.set_application("wordcount", 2000)
    metrics.state.set_checkpoint_interval(10.0)


def samples(metrics: Metrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = metrics.exposition().decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def test_every_metric_is_exposed_with_its_type() -> None:
    metrics = Metrics(process_metrics=False)
    exercise(metrics)
    families = {
        family.name: family.type
        for family in text_string_to_metric_families(metrics.exposition().decode())
        # prometheus_client adds a `<name>_created` gauge per counter and histogram in text format
        if not family.name.endswith("_created")
    }
    assert families == EXPECTED  # nothing missing, nothing unexpected, no process metrics


def test_values_follow_the_calls() -> None:
    metrics = Metrics(process_metrics=False)
    exercise(metrics)
    got = samples(metrics)
    assert got[("dstreams_batches_total", (("outcome", "completed"),))] == 1
    assert got[("dstreams_batches_total", (("outcome", "failed"),))] == 1
    assert got[("dstreams_batch_processing_seconds_count", ())] == 2
    assert got[("dstreams_batch_processing_seconds_sum", ())] == pytest.approx(2.4)
    assert got[("dstreams_last_completed_batch_timestamp_seconds", ())] == 1_700_000_001.0
    assert got[("dstreams_input_records_total", (("partition", "1"), ("topic", "words")))] == 5
    assert got[("dstreams_output_records_total", (("output", "counts"),))] == 7
    assert got[("dstreams_consumer_lag_records", (("partition", "0"), ("topic", "words")))] == 42
    assert got[("dstreams_duplicate_writes_suppressed_total", (("output", "counts"),))] == 2
    assert got[("dstreams_sink_partition_writes_total", (("output", "counts"),))] == 4
    assert got[("dstreams_sink_clients_opened_total", (("output", "counts"),))] == 1
    assert got[("dstreams_lost_offsets_total", (("partition", "1"), ("topic", "words")))] == 100
    assert got[("dstreams_rate_limit_records_per_second", (("source", "lines"),))] == 250
    assert got[("dstreams_batch_step_seconds_count", (("step", "spark_job"),))] == 2
    assert got[("dstreams_batch_step_seconds_sum", (("step", "spark_job"),))] == pytest.approx(0.5)
    assert got[("dstreams_batch_step_seconds_count", (("step", "plan"),))] == 1
    e2e = "dstreams_end_to_end_latency_seconds_bucket"
    assert got[(e2e, (("le", "1.25"), ("output", "counts")))] == 0
    assert got[(e2e, (("le", "1.5"), ("output", "counts")))] == 1
    assert got[("dstreams_recovery_duration_seconds", ())] == 1.25
    assert got[("dstreams_replayed_batches_total", ())] == 4
    assert got[("dstreams_epoch", ())] == 9
    assert got[("dstreams_topic_under_replicated", (("role", "input"), ("topic", "words")))] == 1
    assert got[("dstreams_build_info", (("version", __version__),))] == 1
    assert got[("dstreams_checkpoint_bytes_sum", ())] == 4096
    assert got[("dstreams_last_checkpoint_timestamp_seconds", ())] == 1_700_000_002.0
    assert got[("dstreams_state_keys", (("stream", "s3"),))] == 12
    assert got[("dstreams_state_bytes", (("stream", "s3"),))] == 90
    assert got[("dstreams_recovery_recomputed_batches_total", ())] == 3
    assert got[("dstreams_app_info", (("app", "wordcount"),))] == 1
    assert got[("dstreams_batch_interval_seconds", ())] == 2.0
    assert got[("dstreams_checkpoint_interval_seconds", ())] == 10.0


def test_the_observer_names_the_application_and_its_pace() -> None:
    metrics = Metrics(process_metrics=False)
    Observer("orders", 500, metrics, StatusBoard("orders", 500), None, None)
    got = samples(metrics)
    assert got[("dstreams_app_info", (("app", "orders"),))] == 1
    assert got[("dstreams_batch_interval_seconds", ())] == 0.5
    # A stateless graph never checkpoints: its interval stays 0, which the age alert ignores.
    assert got[("dstreams_checkpoint_interval_seconds", ())] == 0


@pytest.mark.parametrize(
    ("configured", "interval_ms", "expected"),
    [(None, 1000, 10), (None, 250, 40), (None, 60_000, 1), (3, 1000, 3)],
)
def test_checkpoint_interval_is_as_configured_or_about_ten_seconds(
    tmp_path: Path, configured: int | None, interval_ms: int, expected: int
) -> None:
    config: dict[str, object] = {
        "app_id": "wc",
        "job": "examples.wordcount:build",
        "batch_interval_ms": interval_ms,
        "kafka": {"bootstrap_servers": "kafka:9092"},
    }
    if configured is not None:
        config["checkpoint"] = {"interval_batches": configured}
    (tmp_path / "config.yaml").write_text(json.dumps(config))
    settings = load_settings(tmp_path / "config.yaml", {})
    assert checkpoint_interval_batches(settings) == expected


def test_outcomes_are_bounded_and_exposed_from_the_start() -> None:
    metrics = Metrics(process_metrics=False)
    got = samples(metrics)
    assert got[("dstreams_batches_total", (("outcome", "failed"),))] == 0
    with pytest.raises(ValueError, match="not one of completed, failed"):
        metrics.batch_completed("weird", 1.0, 0.0)


def test_no_rate_limit_removes_the_series() -> None:
    metrics = Metrics(process_metrics=False)
    metrics.set_rate_limit("lines", 100.0)
    metrics.set_rate_limit("lines", None)
    metrics.set_rate_limit("never-set", None)
    assert not [key for key in samples(metrics) if key[0].startswith("dstreams_rate_limit")]


def test_instances_do_not_share_a_registry() -> None:
    first, second = Metrics(), Metrics()
    first.set_epoch(1)
    second.set_epoch(2)
    assert samples(first)[("dstreams_epoch", ())] == 1
    assert samples(second)[("dstreams_epoch", ())] == 2
    assert any(name.startswith("process_") for name, _ in samples(first))


def test_an_unknown_batch_step_is_refused() -> None:
    with pytest.raises(ValueError, match="spark_jobs"):
        Metrics(process_metrics=False).batch_step("spark_jobs", 0.1)
