"""The service on the Kafka journal: a first start on a topic that does not exist yet, a SIGKILL,
and a restart that recovers from the topic to an exact word count."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from confluent_kafka import (
    Consumer,
    ConsumerGroupTopicPartitions,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient

from service.dev.service_process import ServiceProcess
from service.journal.base import JournalState
from service.journal.kafka import KafkaJournal
from service.journal.records import EpochRecord
from sinks.files import FileSink

LINES = 2_000


def test_service_recovers_from_a_kafka_journal(
    kafka_bootstrap: str, make_topic: Any, unique_name: str, tmp_path: Path
) -> None:
    topic = make_topic(kafka_bootstrap, unique_name, partitions=2)
    lines = [f"alpha beta w{i % 7} w{i % 11}" for i in range(LINES)]
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    for line in lines:
        producer.produce(topic, line.encode())
    assert producer.flush(30) == 0
    ends = end_offsets(kafka_bootstrap, topic)
    app_id = unique_name.replace("_", "-")[:40]
    journal_topic = f"{unique_name}_journal"
    config = {
        "app_id": app_id,
        "job": "examples.wordcount:build",
        "kafka": {"bootstrap_servers": kafka_bootstrap},
        "sources": {
            "lines": {
                "topics": [topic],
                "starting_offsets": "earliest",
                "codec": "utf-8",
                # A few batches' worth, so the kill lands with work still to do.
                "max_rate_per_partition": 300,
            }
        },
        "sinks": {"counts": {"type": "files", "path": str(tmp_path / "out")}},
        "journal": {"type": "kafka", "topic": journal_topic},
    }
    service = ServiceProcess(config, tmp_path)
    with service:
        service.start()
        service.wait_for(lambda s: service.completed_batches() >= 1, 180, "a first batch")
        assert service.kill() == -9
        service.start()
        service.wait_for(
            lambda s: (
                s.get("epoch") == 2 and group_offsets(kafka_bootstrap, app_id, topic, ends) == ends
            ),
            180,
            "the restarted driver to read everything",
        )
        assert service.terminate() == 0, service.log_tail()

    journal = KafkaJournal({"bootstrap.servers": kafka_bootstrap}, journal_topic, app_id, 1, 1)
    records = journal.read()
    state = JournalState.from_records(records)
    state.validate()
    # Snapshots keep only the latest epoch record.
    assert [r.epoch for r in records if isinstance(r, EpochRecord)] == [2]
    assert state.pending() == []
    assert state.last_positions() == {(topic, p): end for p, end in ends.items()}

    sink = FileSink(tmp_path / "out")
    counted: Counter[str] = Counter()
    for batch_time in sink.committed_batches("counts"):
        for word, count in sink.read_batch("counts", batch_time):
            counted[word] += count
    assert counted == Counter(word for line in lines for word in line.split())


def end_offsets(bootstrap: str, topic: str) -> dict[int, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "test-ends"})
    try:
        partitions = consumer.list_topics(topic, timeout=30).topics[topic].partitions
        return {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1]
            for p in partitions
        }
    finally:
        consumer.close()


def group_offsets(bootstrap: str, group: str, topic: str, partitions: Any) -> dict[int, int]:
    """The offsets the service committed for its group (after each completed batch)."""
    topic_partitions = [TopicPartition(topic, p) for p in partitions]
    admin = AdminClient({"bootstrap.servers": bootstrap})
    request = ConsumerGroupTopicPartitions(group, topic_partitions)
    result = admin.list_consumer_group_offsets([request])[group].result(timeout=30)
    return {tp.partition: tp.offset for tp in result.topic_partitions}
