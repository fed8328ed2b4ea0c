"""The service on the Kafka journal: a first start on a topic that does not exist yet, a SIGKILL,
and a restart that recovers from the topic to an exact word count."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from service.dev.service_process import ServiceProcess
from service.journal.base import JournalState
from service.journal.kafka import KafkaJournal
from service.journal.records import EpochRecord
from service.testing import group_offsets, produce_lines
from sinks.files import FileSink

PARTITIONS = 2
LINES_PER_PARTITION = 1_000


def test_service_recovers_from_a_kafka_journal(
    kafka_bootstrap: str, make_topic: Any, unique_name: str, tmp_path: Path
) -> None:
    topic = make_topic(kafka_bootstrap, unique_name, partitions=PARTITIONS)
    vocabulary = [f"w{i}" for i in range(20)]
    lines = produce_lines(kafka_bootstrap, topic, PARTITIONS, LINES_PER_PARTITION, vocabulary, 7)
    ends = {p: LINES_PER_PARTITION for p in range(PARTITIONS)}
    app_id = unique_name.replace("_", "-")[:40]
    journal_topic = f"{unique_name}_journal"
    config = {
        "app_id": app_id,
        "job": "examples.wordcount:build",
        "kafka": {"bootstrap_servers": kafka_bootstrap, "require_replication": False},
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
                s.get("epoch") == 2
                and group_offsets(kafka_bootstrap, app_id, topic, PARTITIONS) == ends
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
    expected = Counter(word for part in lines.values() for line in part for word in line.split())
    assert counted == expected
