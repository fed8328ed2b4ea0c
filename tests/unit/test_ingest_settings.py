"""Settings of the replication check and the ingest endpoint, and which sources take records."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from service.config.settings import InvalidConfig, load_settings
from service.errors import ConfigError
from service.ingest.app import ingest_topics

BASE: dict[str, Any] = {
    "app_id": "orders",
    "job": "examples.wordcount:build",
    "kafka": {"bootstrap_servers": "localhost:9092"},
    "sources": {
        "lines": {"topics": ["lines"]},
        "both": {"topics": ["a", "b"]},
        "some": {"pattern": "s-.*"},
    },
}


def load(tmp_path: Path, environ: dict[str, str] | None = None, **changes: Any) -> Any:
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump({**BASE, **changes}))
    return load_settings(path, environ or {})


def test_replication_is_required_by_default_in_the_code_not_only_in_the_chart(
    tmp_path: Path,
) -> None:
    kafka = load(tmp_path).kafka
    assert kafka.require_replication is True
    assert (kafka.min_replication_factor, kafka.min_insync_replicas) == (3, 2)
    assert "require_replication" not in str(kafka.librdkafka_config())


def test_require_replication_from_the_environment(tmp_path: Path) -> None:
    settings = load(tmp_path, {"DSTREAMS_KAFKA__REQUIRE_REPLICATION": "false"})
    assert settings.kafka.require_replication is False
    settings = load(tmp_path, {"DSTREAMS_KAFKA__REQUIRE_REPLICATION": "true"})
    assert settings.kafka.require_replication is True


def test_the_one_broker_dev_configs_turn_the_requirement_off(tmp_path: Path) -> None:
    """`config/wordcount.yaml` (the README's first run) and `dstreams demo` run on one broker."""
    from service.cli.demo import demo_config

    root = Path(__file__).resolve().parents[2]
    first_run = load_settings(root / "config" / "wordcount.yaml", {})
    demo = demo_config(tmp_path, "127.0.0.1:9092")
    assert first_run.kafka.require_replication is False
    assert demo["kafka"]["require_replication"] is False


def test_a_minimum_no_topic_could_meet_is_refused(tmp_path: Path) -> None:
    kafka = {**BASE["kafka"], "min_replication_factor": 2, "min_insync_replicas": 3}
    with pytest.raises(InvalidConfig) as caught:
        load(tmp_path, kafka=kafka)
    assert any("min_insync_replicas (3) exceeds" in p for p in caught.value.problems)


def test_ingest_defaults_and_durations(tmp_path: Path) -> None:
    ingest = load(tmp_path).ingest
    assert ingest.enabled is False and ingest.port == 8081
    assert ingest.key_retention_ms == 24 * 3_600_000
    custom = load(tmp_path, ingest={"key_retention_ms": "2h", "ack_timeout_ms": "5s"}).ingest
    assert (custom.key_retention_ms, custom.ack_timeout_ms) == (7_200_000, 5_000)


def test_unknown_ingest_keys_are_refused(tmp_path: Path) -> None:
    with pytest.raises(InvalidConfig) as caught:
        load(tmp_path, ingest={"max_request_byte": 10})
    assert any("max_request_byte" in p for p in caught.value.problems)


def test_every_single_topic_source_takes_records_by_default(tmp_path: Path) -> None:
    assert ingest_topics(load(tmp_path)) == {"lines": "lines"}


def test_named_sources_must_exist_and_read_one_topic(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="'nope', which is not under sources"):
        ingest_topics(load(tmp_path, ingest={"sources": ["nope"]}))
    with pytest.raises(ConfigError, match="must read exactly one topic"):
        ingest_topics(load(tmp_path, ingest={"sources": ["both"]}))
    with pytest.raises(ConfigError, match="must read exactly one topic"):
        ingest_topics(load(tmp_path, ingest={"sources": ["some"]}))


def test_no_source_for_ingest_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no source can take ingested records"):
        ingest_topics(load(tmp_path, sources={"some": {"pattern": "s-.*"}}))
