"""Replication required and checked, on three brokers (default RF 3, min.insync.replicas 2).

- `dstreams run` refuses an RF-1 input topic when `kafka.require_replication` is on (exit 4, before
  Spark starts, naming the topic and the fix) and warns (log and metric) when it is off.
- A job whose every topic is RF 3 / min ISR 2 (or would be created so) passes when required.
- The ingest endpoint refuses to start on an RF-1 topic when required, and answers 503 (never 200)
  with two of three brokers down; retried with their keys after the brokers return, the refused
  requests are each written exactly once. (One broker down, acknowledged as usual: the chaos
  tier's tests/chaos/test_replicated_ingest.py.)
"""

from __future__ import annotations

import json
import re
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, TopicPartition

from connectors.kafka_client import end_offsets
from service.config.settings import Settings
from service.dev.ingest_client import IngestClient, IngestReply
from service.dev.kafka_cluster import LocalKafkaCluster
from service.dev.service_process import ServiceProcess
from service.driver.engine import EXIT_REFUSED, SPARK_UP, build_context
from service.driver.replication import check_replication
from service.errors import ReplicationInsufficient
from service.ingest.app import IngestService
from service.observe.metrics import Metrics

PARTITIONS = 2
# Requests sent while a replica is missing, each refused after the ack timeout (3 s or so).
REFUSED_REQUESTS = 3


def job_config(
    bootstrap: str, topic: str, app_id: str, workdir: Path, **kafka: Any
) -> dict[str, Any]:
    return {
        "app_id": app_id,
        "job": "examples.wordcount:build",
        "kafka": {"bootstrap_servers": bootstrap, "require_replication": False, **kafka},
        "sources": {"lines": {"topics": [topic], "codec": "utf-8"}},
        "sinks": {"counts": {"type": "files", "path": str(workdir / "out")}},
        "journal": {"type": "file", "path": str(workdir / "journal")},
    }


def under_replicated(metrics_text: str) -> dict[str, float]:
    """topic -> value of dstreams_topic_under_replicated in a /metrics body."""
    pattern = r"^dstreams_topic_under_replicated\{(?P<labels>[^}]*)\} (?P<value>\S+)$"
    found = {}
    for match in re.finditer(pattern, metrics_text, re.M):
        topic = re.search(r'topic="([^"]*)"', match["labels"])
        assert topic is not None
        found[topic[1]] = float(match["value"])
    return found


def test_run_refuses_an_rf1_input_topic_when_replication_is_required(
    kafka_cluster3: LocalKafkaCluster, make_topic: Any, unique_name: str, tmp_path: Path
) -> None:
    bootstrap = kafka_cluster3.bootstrap_servers
    topic = make_topic(bootstrap, unique_name, partitions=PARTITIONS, replication=1)
    config = job_config(bootstrap, topic, unique_name[:40], tmp_path, require_replication=True)
    with ServiceProcess(config, tmp_path) as driver:
        driver.start()
        code = driver.wait(120)
        log = driver.log_path.read_text()
    assert code == EXIT_REFUSED, log
    assert f"topic '{topic}' (input of source lines) has replication factor 1" in log
    assert f"kafka-reassign-partitions.sh --bootstrap-server {bootstrap}" in log
    assert SPARK_UP not in log  # refused before Spark started


def test_run_warns_and_sets_the_metric_when_replication_is_not_required(
    kafka_cluster3: LocalKafkaCluster, make_topic: Any, unique_name: str, tmp_path: Path
) -> None:
    bootstrap = kafka_cluster3.bootstrap_servers
    weak = make_topic(bootstrap, unique_name, partitions=PARTITIONS, replication=1)
    config = job_config(bootstrap, weak, unique_name[:40], tmp_path)
    with ServiceProcess(config, tmp_path) as driver:
        driver.start()
        deadline = time.monotonic() + 120
        gauge: dict[str, float] = {}
        while weak not in gauge:
            assert driver.running(), driver.log_tail()
            assert time.monotonic() < deadline, "the metric never appeared"
            gauge = under_replicated((driver.get("/metrics") or b"").decode())
            time.sleep(0.2)
        log = driver.log_path.read_text()
    assert gauge[weak] == 1
    assert f"under-replicated: topic '{weak}'" in log


def test_a_fully_replicated_job_passes_when_required(
    kafka_cluster3: LocalKafkaCluster, make_topic: Any, unique_name: str, tmp_path: Path
) -> None:
    bootstrap = kafka_cluster3.bootstrap_servers
    topic = make_topic(bootstrap, unique_name, partitions=PARTITIONS, replication=3)
    config = job_config(bootstrap, topic, unique_name[:40], tmp_path, require_replication=True)
    # A Kafka sink and a Kafka journal, neither created yet: judged by what they would get.
    config["sinks"]["counts"] = {"type": "kafka", "topic": f"{topic}.out", "replication_factor": 3}
    config["journal"] = {
        "type": "kafka",
        "topic": f"{topic}.journal",
        "replication_factor": 3,
        "min_insync_replicas": 2,
    }
    settings = Settings.model_validate(config)
    ctx = build_context(settings)
    metrics = Metrics(process_metrics=False)
    try:
        check_replication(settings, ctx, metrics)
    finally:
        ctx.close()
    gauge = under_replicated(metrics.exposition().decode())
    marker_topic = f"dstreams.markers.{settings.app_id}.counts"
    assert gauge == {topic: 0, f"{topic}.out": 0, marker_topic: 0, f"{topic}.journal": 0}

    # The same job with the sink left at replication factor 1 is refused, naming the setting.
    config["sinks"]["counts"]["replication_factor"] = 1
    settings = Settings.model_validate(config)
    ctx = build_context(settings)
    try:
        with pytest.raises(ReplicationInsufficient, match="set sinks.counts.replication_factor: 3"):
            check_replication(settings, ctx, Metrics(process_metrics=False))
    finally:
        ctx.close()


# --- the ingest endpoint ------------------------------------------------------------------------


def ingest_settings(bootstrap: str, topic: str, app_id: str, **kafka: Any) -> Settings:
    return Settings.model_validate(
        {
            "app_id": app_id,
            "job": "examples.wordcount:build",
            "kafka": {"bootstrap_servers": bootstrap, "require_replication": False, **kafka},
            "sources": {"events": {"topics": [topic]}},
            # Short, so the two-brokers-down phase costs a few seconds per refused request.
            "ingest": {"host": "127.0.0.1", "port": 0, "ack_timeout_ms": 3000},
        }
    )


def test_ingest_refuses_to_start_on_an_rf1_topic_when_required(
    kafka_cluster3: LocalKafkaCluster, make_topic: Any, unique_name: str
) -> None:
    bootstrap = kafka_cluster3.bootstrap_servers
    topic = make_topic(bootstrap, unique_name, replication=1)
    service = IngestService(
        ingest_settings(bootstrap, topic, unique_name[:40], require_replication=True)
    )
    with pytest.raises(ReplicationInsufficient, match=f"topic '{topic}' .* replication factor 1"):
        service.start()
    assert service.server is None  # nothing served


def read_ids(bootstrap: str, topic: str) -> Counter[int]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"{topic}-reader",
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
            "enable.auto.commit": False,
        }
    )
    try:
        deadline = time.monotonic() + 60
        ends = {
            p: end_offsets(consumer, TopicPartition(topic, p), deadline)[1]
            for p in range(PARTITIONS)
        }
        pending = {p for p, end in ends.items() if end > 0}
        consumer.assign([TopicPartition(topic, p, 0) for p in pending])
        ids: Counter[int] = Counter()
        while pending:
            assert time.monotonic() < deadline, f"did not reach the end of {topic}"
            message = consumer.poll(1.0)
            if message is None:
                continue
            if message.error() is not None:
                if message.error().code() == KafkaError._PARTITION_EOF:
                    pending.discard(message.partition())
                continue
            ids[int(json.loads(message.value())["id"])] += 1
            if message.offset() + 1 >= ends[message.partition()]:
                pending.discard(message.partition())
        return ids
    finally:
        consumer.close()


def batch(first: int, count: int = 10) -> bytes:
    return b"".join(json.dumps({"id": i}).encode() + b"\n" for i in range(first, first + count))


@pytest.mark.timeout(420)
def test_ingest_answers_503_never_200_without_enough_in_sync_replicas(
    kafka_cluster3: LocalKafkaCluster, make_topic: Any, unique_name: str
) -> None:
    cluster = kafka_cluster3
    bootstrap = cluster.bootstrap_servers
    # min.insync.replicas 3: one broker down leaves too few in-sync replicas for any write.
    topic = make_topic(
        bootstrap,
        unique_name,
        partitions=PARTITIONS,
        replication=3,
        config={"min.insync.replicas": "3"},
    )
    settings = ingest_settings(bootstrap, topic, unique_name[:40], require_replication=True)
    service = IngestService(settings)  # passes the check: RF 3, min ISR 3, keys topic RF 3/2
    client = IngestClient("127.0.0.1", service.start())
    sent: dict[str, int] = {}
    try:
        assert client.send_until_acknowledged("events", batch(0), "b0", deadline_s=60).status == 200
        sent["b0"] = 0
        cluster.kill_broker(2)
        refused: list[IngestReply] = []
        for number in range(1, REFUSED_REQUESTS + 1):
            reply = client.post("events", batch(10 * number), key=f"b{number}")
            refused.append(reply)
            sent[f"b{number}"] = 10 * number
        assert [r.status for r in refused] == [503] * len(refused), refused
        assert all(r.retry_after_s is not None for r in refused)
    finally:
        cluster.restart_broker(2)
    try:
        # Retried with their keys until acknowledged: each batch ends up in the topic once.
        for key, first in sent.items():
            client.send_until_acknowledged("events", batch(first), key, deadline_s=180)
    finally:
        client.close()
        service.stop()
    ids = read_ids(bootstrap, topic)
    assert ids == Counter(range(10 * (REFUSED_REQUESTS + 1))), sorted(
        i for i, n in ids.items() if n != 1
    )
