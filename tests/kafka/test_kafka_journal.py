"""KafkaJournal against a real broker: its topic, snapshot windows and producer errors.

What every journal backend does (epochs, fencing, dead appends, compaction, the CLI) is checked on
this one too by the journal contract suite, tests/contracts/test_journal_contract.py.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, ConfigResource

from connectors.offsets import OffsetRange
from service.errors import FencedOut, JournalError
from service.journal.base import JournalState
from service.journal.kafka import KafkaJournal
from service.journal.records import PlannedRecord

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
    # Any retriable error but a timeout, which finishes the producer (the next test).
    loading = KafkaError(KafkaError.COORDINATOR_LOAD_IN_PROGRESS, "x", retriable=True)
    producer = ScriptedProducer(loading)
    scripted_journal(producer).append(planned(1, 1000, 0, 1))
    assert producer.calls == ["begin", "produce", "commit", "commit"]


def test_a_timed_out_commit_is_never_resumed_or_aborted_and_stops_later_appends() -> None:
    producer = ScriptedProducer(KafkaError(KafkaError._TIMED_OUT, "x", retriable=True))
    producer.purge = lambda: producer.calls.append("purge")  # type: ignore[attr-defined] # scripted
    producer.close = lambda: producer.calls.append("close")  # type: ignore[attr-defined] # scripted
    journal = scripted_journal(producer)
    with pytest.raises(JournalError, match="commit timed out.*Restart the driver"):
        journal.append(planned(1, 1000, 0, 1))
    assert producer.calls == ["begin", "produce", "commit", "purge", "close"]
    with pytest.raises(JournalError, match="earlier append failed"):
        journal.append(planned(1, 1000, 0, 1))


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
