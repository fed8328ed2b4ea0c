"""KafkaJournal against a real broker: append/read, epochs, fencing by a newer driver, snapshots."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from click.testing import CliRunner
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, ConfigResource

from connectors.offsets import OffsetRange
from service.cli.journal import journal as journal_group
from service.errors import FencedOut, JournalError
from service.journal.base import Journal, JournalState
from service.journal.kafka import KafkaJournal
from service.journal.records import (
    CheckpointRecord,
    CompletedRecord,
    EpochRecord,
    PlannedRecord,
    SnapshotRecord,
)

JournalFactory = Callable[..., KafkaJournal]


def planned(epoch: int, t: int, start: int, end: int) -> PlannedRecord:
    return PlannedRecord(epoch, t, (OffsetRange("words", 0, start, end),), "fp")


@pytest.fixture
def make_journal(kafka_bootstrap: str, unique_name: str) -> Iterator[JournalFactory]:
    """Journals on one topic and app id unique to the test; all closed afterwards."""
    made: list[KafkaJournal] = []

    def make(**kwargs: object) -> KafkaJournal:
        journal = KafkaJournal(
            {"bootstrap.servers": kafka_bootstrap},
            topic=f"{unique_name}_journal",
            app_id=unique_name,
            replication_factor=1,
            min_insync_replicas=1,
            timeout_s=30.0,
            **kwargs,  # type: ignore[arg-type]  # keyword options of KafkaJournal
        )
        made.append(journal)
        return journal

    yield make
    for journal in made:
        journal.close()


def test_append_then_read_from_a_fresh_reader(make_journal: JournalFactory) -> None:
    writer = make_journal(owner="driver-1")
    assert isinstance(writer, Journal)
    assert writer.open() == 1
    records = [planned(1, 1000, 0, 10), CompletedRecord(1, 1000, {"counts": 4})]
    for record in records:
        writer.append(record)

    read = make_journal().read()
    assert isinstance(read[0], EpochRecord) and read[0].owner == "driver-1"
    assert read[1:] == records


def test_a_journal_not_yet_created_reads_empty_and_is_not_created_by_reading(
    make_journal: JournalFactory, kafka_bootstrap: str
) -> None:
    journal = make_journal()
    assert journal.read() == []
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    assert journal.topic not in admin.list_topics(timeout=10).topics


def test_topic_is_created_with_one_partition_and_the_durability_settings(
    make_journal: JournalFactory, kafka_bootstrap: str
) -> None:
    journal = make_journal()
    journal.open()
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    assert len(admin.list_topics(journal.topic, timeout=10).topics[journal.topic].partitions) == 1
    resource = ConfigResource("topic", journal.topic)
    configs = admin.describe_configs([resource])[resource].result(timeout=10)
    assert configs["cleanup.policy"].value == "delete"
    assert configs["retention.ms"].value == "-1"
    assert configs["min.insync.replicas"].value == "1"


def test_reopen_takes_the_next_epoch(make_journal: JournalFactory) -> None:
    for expected in (1, 2, 3):
        journal = make_journal()
        assert journal.open() == expected
        journal.append(planned(expected, expected * 1000, (expected - 1) * 10, expected * 10))
        journal.close()
    state = JournalState.from_records(make_journal().read())
    state.validate()
    assert state.epoch == 3
    assert sorted(state.planned) == [1000, 2000, 3000]


def test_second_driver_fences_the_first(make_journal: JournalFactory) -> None:
    old, new = make_journal(owner="old"), make_journal(owner="new")
    assert old.open() == 1
    old.append(planned(1, 1000, 0, 10))
    assert new.open() == 2

    with pytest.raises(FencedOut, match="epoch 1.*fenced by a newer driver"):
        old.append(CompletedRecord(1, 1000, {}))
    with pytest.raises(JournalError):
        old.append(CompletedRecord(1, 1000, {}))

    new.append(CompletedRecord(2, 1000, {}))
    state = JournalState.from_records(make_journal().read())
    state.validate()
    assert state.epoch == 2
    assert [(t, c.epoch) for t, c in state.completed.items()] == [(1000, 2)]


def test_reads_start_at_the_latest_snapshot(make_journal: JournalFactory) -> None:
    writer = make_journal(snapshot_every=5)
    epoch = writer.open()
    for i, t in enumerate(range(1000, 21_000, 1000)):
        writer.append(planned(epoch, t, i * 10, i * 10 + 10))
        writer.append(CompletedRecord(epoch, t, {"out": 10}))
    writer.append(CheckpointRecord(epoch, 20_000, {"s": "ckpt-20000"}))
    writer.append(planned(epoch, 21_000, 200, 210))

    reader = make_journal(snapshot_every=5)
    raw = reader._read_from_last_snapshot()
    assert isinstance(raw[0][1], SnapshotRecord)
    assert raw[0][0] > 40, "the read should begin near the end, at the newest snapshot"
    assert len(raw) <= 6

    state = JournalState.from_records(reader.read())
    state.validate()
    assert state.epoch == 1
    assert state.checkpoint == CheckpointRecord(1, 20_000, {"s": "ckpt-20000"})
    assert [p.batch_time for p in state.pending()] == [21_000]
    assert state.last_positions() == {("words", 0): 210}
    assert state.last_completed is not None and state.last_completed.batch_time == 20_000


def test_a_long_tail_without_recent_snapshot_is_read_in_growing_windows(
    make_journal: JournalFactory,
) -> None:
    writer = make_journal(snapshot_every=10_000)
    epoch = writer.open()
    for i, t in enumerate(range(1000, 41_000, 1000)):
        writer.append(planned(epoch, t, i * 10, i * 10 + 10))
    reader = make_journal(snapshot_every=2)  # first window far too small: must widen
    state = JournalState.from_records(reader.read())
    state.validate()
    assert len(state.planned) == 40 and state.epoch == 1


def test_cli_show_and_verify_read_the_topic(
    make_journal: JournalFactory, kafka_bootstrap: str
) -> None:
    writer = make_journal(owner="driver-k")
    writer.open()
    writer.append(planned(1, 1000, 0, 10))
    where = ["--kafka", kafka_bootstrap, "--topic", writer.topic, "--app", writer.app_id]
    runner = CliRunner()
    shown = runner.invoke(journal_group, ["show", *where])
    assert shown.exit_code == 0, shown.output
    assert "by driver-k" in shown.output and "pending:        1000" in shown.output
    verified = runner.invoke(journal_group, ["verify", *where])
    assert verified.exit_code == 0 and "ok —" in verified.output


# --- librdkafka's transactional error contract, with a scripted producer (no broker needed) ----


class ScriptedProducer:
    """Fails `commit_transaction` with the given errors in turn, then succeeds."""

    def __init__(self, *commit_errors: KafkaError) -> None:
        self.commit_errors = list(commit_errors)
        self.calls: list[str] = []

    def begin_transaction(self) -> None:
        self.calls.append("begin")

    def produce(self, topic: str, **kwargs: object) -> None:
        self.calls.append("produce")

    def commit_transaction(self, timeout: float) -> None:
        self.calls.append("commit")
        if self.commit_errors:
            raise KafkaException(self.commit_errors.pop(0))

    def abort_transaction(self, timeout: float) -> None:
        self.calls.append("abort")

    def flush(self, timeout: float) -> int:
        return 0


def scripted_journal(producer: ScriptedProducer) -> KafkaJournal:
    journal = KafkaJournal({}, "t", "app", 1, 1, timeout_s=5.0)
    journal._producer, journal._epoch = producer, 1
    return journal


def test_abortable_commit_error_aborts_and_sends_again() -> None:
    producer = ScriptedProducer(KafkaError(KafkaError._STATE, "x", txn_requires_abort=True))
    scripted_journal(producer).append(planned(1, 1000, 0, 1))
    assert producer.calls == ["begin", "produce", "commit", "abort", "begin", "produce", "commit"]


def test_retriable_commit_error_resumes_the_commit() -> None:
    producer = ScriptedProducer(KafkaError(KafkaError._TIMED_OUT, "x", retriable=True))
    scripted_journal(producer).append(planned(1, 1000, 0, 1))
    assert producer.calls == ["begin", "produce", "commit", "commit"]


def test_fencing_error_is_fenced_out() -> None:
    producer = ScriptedProducer(KafkaError(KafkaError._FENCED, "fenced", fatal=True))
    with pytest.raises(FencedOut, match="fenced by a newer driver"):
        scripted_journal(producer).append(planned(1, 1000, 0, 1))


def test_other_fatal_error_stops_every_later_append() -> None:
    producer = ScriptedProducer(KafkaError(KafkaError._INCONSISTENT, "bad", fatal=True))
    journal = scripted_journal(producer)
    with pytest.raises(JournalError, match="failed fatally.*Restart the driver"):
        journal.append(planned(1, 1000, 0, 1))
    with pytest.raises(JournalError, match="earlier append failed"):
        journal.append(planned(1, 1000, 0, 1))
