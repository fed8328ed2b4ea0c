"""An existing journal or marker topic whose settings let the brokers delete records dstreams still
needs is refused at start-up, naming the `kafka-configs` command that fixes it: a compacted or
finitely retained journal topic, and a marker topic cleaned by deletion with a short retention."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from service.dev.service_process import ServiceProcess
from service.driver.engine import EXIT_REFUSED
from service.errors import JournalError
from service.journal.kafka import KafkaJournal
from sinks.kafka_markers import default_marker_topic

FIX = "kafka-configs --bootstrap-server <brokers> --alter --entity-type topics --entity-name"


def job_config(bootstrap: str, topic: str, app_id: str, workdir: Path) -> dict[str, Any]:
    return {
        "app_id": app_id,
        "job": "examples.wordcount:build",
        "kafka": {"bootstrap_servers": bootstrap, "require_replication": False},
        "sources": {"lines": {"topics": [topic], "codec": "utf-8"}},
        "sinks": {"counts": {"type": "files", "path": str(workdir / "out")}},
        "journal": {"type": "file", "path": str(workdir / "journal")},
    }


def refusal(config: dict[str, Any], workdir: Path) -> str:
    """The log of a service that must refuse to start with `config`."""
    with ServiceProcess(config, workdir) as driver:
        driver.start()
        code = driver.wait(180)
        log = driver.log_path.read_text()
    assert code == EXIT_REFUSED, log
    return log


def test_a_compacted_journal_topic_is_refused_at_start_up(
    kafka_bootstrap: str, make_topic: Any, unique_name: str, tmp_path: Path
) -> None:
    source = make_topic(kafka_bootstrap, unique_name)
    # Unlimited retention, as the journal needs: only the compaction is wrong.
    unsafe = {"cleanup.policy": "compact", "retention.ms": "-1"}
    journal = make_topic(kafka_bootstrap, f"{unique_name}_journal", config=unsafe)
    config = job_config(kafka_bootstrap, source, unique_name.replace("_", "-")[:40], tmp_path)
    config["journal"] = {"type": "kafka", "topic": journal}

    log = refusal(config, tmp_path)

    assert (
        f"journal topic '{journal}' has cleanup.policy=compact; expected cleanup.policy=delete"
        in log
    )
    assert f"{FIX} {journal} --add-config cleanup.policy=delete" in log


def test_a_journal_topic_with_a_finite_retention_is_refused(
    kafka_bootstrap: str, make_topic: Any, unique_name: str
) -> None:
    topic = f"{unique_name}_journal"
    make_topic(
        kafka_bootstrap, topic, config={"retention.ms": "3600000", "retention.bytes": "1048576"}
    )
    journal = KafkaJournal(
        {"bootstrap.servers": kafka_bootstrap}, topic, unique_name, 1, 1, timeout_s=30.0
    )

    with pytest.raises(JournalError) as refused:
        journal.open()
    journal.close()

    assert str(refused.value).startswith(
        f"journal topic '{topic}' has retention.ms=3600000, retention.bytes=1048576; expected "
        "retention.ms=-1, retention.bytes=-1"
    )
    assert str(refused.value).endswith(
        f"{FIX} {topic} --add-config retention.ms=-1,retention.bytes=-1"
    )


def test_a_marker_topic_cleaned_by_deletion_is_refused_at_start_up(
    kafka_bootstrap: str, make_topic: Any, unique_name: str, tmp_path: Path
) -> None:
    source = make_topic(kafka_bootstrap, unique_name)
    app_id = unique_name.replace("_", "-")[:40]
    markers = default_marker_topic(app_id, "counts")
    make_topic(
        kafka_bootstrap, markers, config={"cleanup.policy": "delete", "retention.ms": "60000"}
    )
    config = job_config(kafka_bootstrap, source, app_id, tmp_path)
    config["sinks"] = {"counts": {"type": "kafka", "topic": f"{unique_name}_out"}}

    log = refusal(config, tmp_path)

    assert (
        f"marker topic '{markers}' has cleanup.policy=delete; expected cleanup.policy=compact"
        in log
    )
    assert f"{FIX} {markers} --add-config cleanup.policy=compact" in log
