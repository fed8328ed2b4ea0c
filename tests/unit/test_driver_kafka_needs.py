"""The driver's replication and ACL checks learn the topics of the outputs from the sink protocol
(`Sink.kafka_needs`), never from the sink's class: a fake sink that declares topics gets them
checked. No broker: pattern sources are resolved by a fake finder."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from connectors.kafka_client.access import Need
from connectors.replication import TopicUse
from service.config.settings import Settings, load_settings
from service.driver.access import job_needs
from service.driver.replication import job_topics
from service.driver.wiring import make_kafka_source
from service.graph.context import StreamingContext
from sinks.base import KafkaNeeds, KafkaTopic
from sinks.memory import MemorySink

SETTINGS: dict[str, Any] = {
    "app_id": "wc",
    "job": "examples.wordcount:build",
    "kafka": {"bootstrap_servers": "127.0.0.1:1"},
    "sources": {"lines": {"pattern": "lines-.*"}},
    "journal": {"type": "kafka", "topic": "wc-journal", "replication_factor": 3},
}


class DeclaringSink(MemorySink):
    """A sink that declares what it needs of Kafka and holds no Kafka client at all."""

    def __init__(self, needs: KafkaNeeds) -> None:
        super().__init__()
        self.needs = needs
        self.asked: list[tuple[str, str]] = []

    def kafka_needs(self, app: str, output: str) -> KafkaNeeds:
        self.asked.append((app, output))
        return self.needs


OUT = KafkaNeeds(
    topics=(
        KafkaTopic("out", "output", ("WRITE",), 2),
        KafkaTopic("out-markers", "markers", ("WRITE", "READ"), 2),
    ),
    transactional_id_prefix="txn.wc.",
    reads_broker_configs=True,
)
LETTERS = KafkaNeeds(topics=(KafkaTopic("letters", "dead-letters", ("WRITE",), 1),))


def find(pattern: str) -> list[str]:
    assert pattern == "lines-.*"
    return ["lines-1", "lines-2"]


def job(tmp_path: Path) -> tuple[Settings, StreamingContext, DeclaringSink]:
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(SETTINGS))
    settings = load_settings(path, {})
    ctx = StreamingContext(
        None, "wc", 1000, source_factory=lambda n: make_kafka_source(settings, n)
    )
    lines = ctx.source("lines")
    counts = DeclaringSink(OUT)
    lines.write("counts", counts)
    lines.write("lines.dead-letters", DeclaringSink(LETTERS))
    lines.write("debug", MemorySink())  # needs nothing of Kafka
    lines.foreach_batch(lambda rdd, t: None)
    return settings, ctx, counts


def test_replication_checks_the_topics_each_sink_declares(tmp_path: Path) -> None:
    settings, ctx, counts = job(tmp_path)
    try:
        topics = list(job_topics(settings, ctx, find))
    finally:
        ctx.close()
    assert counts.asked == [("wc", "counts")]
    assert topics == [
        TopicUse("lines-1", "input", "source lines"),
        TopicUse("lines-2", "input", "source lines"),
        TopicUse("out", "output", "output counts", creates_with=2, setting="sinks.counts"),
        TopicUse("out-markers", "markers", "output counts", creates_with=2, setting="sinks.counts"),
        TopicUse(
            "letters",
            "dead-letters",
            "output lines.dead-letters",
            creates_with=1,
            setting="dead_letter",
        ),
        TopicUse(
            "wc-journal",
            "journal",
            "the Kafka journal",
            creates_with=3,
            creates_min_insync=1,
            setting="journal",
        ),
    ]


def test_the_acl_check_asks_for_the_access_each_sink_declares(tmp_path: Path) -> None:
    settings, ctx, _ = job(tmp_path)
    try:
        needs = job_needs(settings, ctx, find)
    finally:
        ctx.close()
    out, markers = "the output topic of output counts", "the markers topic of output counts"
    letters = "the dead-letters topic of output lines.dead-letters"
    journal = "the journal topic of the Kafka journal"
    assert needs == [
        Need("topic", "lines-1", "READ", "the input topic of source lines"),
        Need("topic", "lines-2", "READ", "the input topic of source lines"),
        Need("topic", "out", "WRITE", out, creates=True),
        Need("topic", "out-markers", "WRITE", markers, creates=True),
        Need("topic", "out-markers", "READ", markers, creates=True),
        Need("topic", "letters", "WRITE", letters, creates=True),
        Need("topic", "wc-journal", "WRITE", journal, creates=True),
        Need("topic", "wc-journal", "READ", journal, creates=True),
        Need("group", "wc", "READ", "the consumer group of source lines"),
        Need(
            "cluster",
            "kafka-cluster",
            "DESCRIBE_CONFIGS",
            "reading the brokers' transaction.max.timeout.ms (Kafka outputs)",
        ),
        Need("transactional-id", "txn.wc.", "WRITE", "the Kafka outputs' transactions"),
        Need(
            "transactional-id", "dstreams-journal.wc.", "WRITE", "the Kafka journal's transactions"
        ),
    ]


def test_two_kafka_outputs_ask_for_the_cluster_and_their_prefix_once(tmp_path: Path) -> None:
    settings, ctx, _ = job(tmp_path)
    ctx.source("lines").write("again", DeclaringSink(OUT))
    try:
        needs = job_needs(settings, ctx, find)
    finally:
        ctx.close()
    assert sum(need.resource == "cluster" for need in needs) == 1
    assert [need.name for need in needs if need.resource == "transactional-id"] == [
        "txn.wc.",
        "dstreams-journal.wc.",
    ]
