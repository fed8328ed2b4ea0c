"""`dstreams audit --config` over a Kafka output and its dead letters, against a real broker: three
batches written by the sink as the driver writes them pass; a duplicated part, a missing marker
and a gap in offsets are each caught and named, with exit 1."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner
from confluent_kafka import Producer

from connectors.offsets import OffsetRange
from service.cli.audit import audit
from service.journal.file import FileJournal
from service.journal.records import CompletedRecord, PlannedRecord
from sinks.base import BatchKey
from sinks.dead_letters import DeadLetter, DeadLetterSink
from sinks.kafka import KafkaSink, close_clients
from sinks.kafka_markers import Marker

OUTPUT = "counts"
LETTERS = "lines.dead-letters"
TIMES = (1000, 2000, 3000)
TASKS = 2


@pytest.fixture(autouse=True)
def _fresh_clients() -> Iterator[None]:
    close_clients()
    yield
    close_clients()


@dataclass
class Job:
    app: str
    config: Path
    journal: Path
    sink: KafkaSink
    letters: DeadLetterSink
    bootstrap: str

    def audit(self) -> Any:
        return CliRunner().invoke(audit, ["--config", str(self.config)])

    def journal_batches(self, gap_at: int | None = None) -> None:
        """Plans and completions of TIMES (10 offsets each); `gap_at`: from that batch on,
        plans start 5 offsets late."""
        with FileJournal(self.journal, owner="test") as journal:
            epoch = journal.open()
            for t in TIMES:
                start = TIMES.index(t) * 10 + (5 if gap_at is not None and t >= gap_at else 0)
                ranges = (OffsetRange("lines", 0, start, start + 10),)
                journal.append(PlannedRecord(epoch, t, ranges, "fp"))
                rows = {OUTPUT: 2 * TASKS, LETTERS: 1}
                tasks = {OUTPUT: TASKS, LETTERS: 1}
                journal.append(CompletedRecord(epoch, t, rows, partitions=tasks))

    def write(self, t: int, p: int) -> None:
        self.sink.write(BatchKey(self.app, OUTPUT, t, p), [(f"w{p}", t), (f"v{p}", t)])

    def write_letters(self, t: int) -> None:
        letter = DeadLetter("lines", 0, t, "DecodeError", "not UTF-8", None, b"\xff")
        self.letters.write(BatchKey(self.app, LETTERS, t, 0), [letter])


@pytest.fixture
def job(kafka_bootstrap: str, unique_name: str, tmp_path: Path) -> Job:
    """An app whose journal completed TIMES, each written and committed in both sinks."""
    app = f"audit_{unique_name}"
    topic, letters_topic = f"{unique_name}_counts", f"{unique_name}_letters"
    config = tmp_path / "job.yaml"
    settings = {
        "app_id": app,
        "job": "examples.wordcount:build",
        "kafka": {"bootstrap_servers": kafka_bootstrap, "require_replication": False},
        "sinks": {OUTPUT: {"type": "kafka", "topic": topic, "partitions": TASKS}},
        "dead_letter": {"topic": letters_topic},
        "journal": {"type": "file", "path": str(tmp_path / "journal")},
    }
    config.write_text(yaml.safe_dump(settings))
    conf = {"bootstrap.servers": kafka_bootstrap}
    sink = KafkaSink(conf, topic, partitions=TASKS, transaction_timeout_ms=10_000)
    letters = DeadLetterSink(conf, letters_topic, transaction_timeout_ms=10_000)
    sink.setup(app, OUTPUT)
    letters.setup(app, LETTERS)
    return Job(app, config, tmp_path / "journal", sink, letters, kafka_bootstrap)


def write_all(job: Job, leave_out: tuple[int, int] | None = None) -> None:
    for t in TIMES:
        for p in range(TASKS):
            if (t, p) != leave_out:
                job.write(t, p)
        job.write_letters(t)


def test_batches_committed_once_pass_and_dead_letters_are_counted(job: Job) -> None:
    write_all(job)
    job.journal_batches()
    result = job.audit()
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert f"  {OUTPUT} (kafka): 3 completed batches, checked" in lines
    assert f"  {LETTERS} (dead-letters): 3 completed batches, checked" in lines
    assert "    3 dead letters" in lines
    assert not [line for line in lines if line.startswith("VIOLATION")], result.output


def test_a_duplicated_part_is_caught(job: Job) -> None:
    write_all(job)
    job.journal_batches()
    # A writer that skipped the marker check commits batch 2000's partition 1 a second time.
    settings = job.sink.producer_settings(BatchKey(job.app, OUTPUT, 2000, 1))
    zombie = Producer(settings)
    zombie.init_transactions(30)
    zombie.begin_transaction()
    zombie.produce(job.sink.topic, key=b"w1", value=b"2000", partition=1)
    marker = Marker(job.app, OUTPUT, 1, 2000, 1)
    marker_topic = job.sink.marker_topic_for(job.app, OUTPUT)
    zombie.produce(marker_topic, key=marker.record_key, value=marker.encode(), partition=1)
    zombie.commit_transaction(30)

    result = job.audit()
    assert result.exit_code == 1, result.output
    assert (
        f"VIOLATION duplicate-marker: output {OUTPUT} batch 2000 partition 1 is committed 2 times"
    ) in result.output


def test_committed_records_no_marker_names_are_caught(job: Job) -> None:
    write_all(job)
    job.journal_batches()
    # Rows of a part written again by a writer that left no marker (or another program).
    stray = Producer({"bootstrap.servers": job.bootstrap, "transactional.id": f"{job.app}-x"})
    stray.init_transactions(30)
    stray.begin_transaction()
    stray.produce(job.sink.topic, key=b"w0", value=b"1000", partition=0)
    stray.commit_transaction(30)

    result = job.audit()
    assert result.exit_code == 1, result.output
    assert (
        f"VIOLATION record-count: output topic {job.sink.topic} holds 13 committed records, but "
        f"the markers of {OUTPUT} name 12 (a part written twice, or records of another writer)"
    ) in result.output


def test_a_missing_marker_is_caught(job: Job) -> None:
    write_all(job, leave_out=(2000, 1))  # the journal completed it, the sink never committed it
    job.journal_batches()
    result = job.audit()
    assert result.exit_code == 1, result.output
    assert (
        f"VIOLATION missing-marker: output {OUTPUT} batch 2000: partition 1 of 2 has no "
        "committed marker"
    ) in result.output
    assert result.output.splitlines()[-1].endswith(": 1 violations of exactly-once")


def test_a_gap_in_offsets_is_caught(job: Job) -> None:
    write_all(job)
    job.journal_batches(gap_at=3000)
    result = job.audit()
    assert result.exit_code == 1, result.output
    assert "VIOLATION gap: lines-0: offsets [20, 25) were never planned" in result.output
