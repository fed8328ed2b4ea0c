"""The ingest writer's decisions with a scripted producer: what is written, answered, re-read.

Real transactions are exercised against brokers in tests/kafka/test_ingest_endpoint.py; here
each failure shape librdkafka can report is injected to check what the writer does next.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from service.ingest.keys import KeyEntry, KeyLedger
from service.ingest.parsing import Records
from service.ingest.writer import (
    KEY_HEADER,
    WRITING_AT_ONCE,
    Answer,
    IngestRequest,
    IngestWriter,
)

KEYS_TOPIC = "keys"


TOPIC_PARTITIONS = 4


class FakeProducer:
    """Records what a transactional producer is asked; `commit_error`/`abort_error` script
    failures (an exception, or a list consumed one per call)."""

    def __init__(self) -> None:
        self.committed: list[tuple[str, bytes | None, bytes, Any]] = []
        self.open: list[tuple[str, bytes | None, bytes, Any]] | None = None
        self.commit_errors: list[Exception] = []
        # Raised by produce(), one per call (_STATE: the transaction had already failed).
        self.produce_errors: list[Exception] = []
        self.abort_error: Exception | None = None
        self.on_abort: Callable[[], None] = lambda: None
        self.initialised = False
        self.aborted = 0
        self.transactions = 0
        self.reports: list[Callable[[Any, Any], None]] = []
        # Values the "broker" refuses with this error code (reported, then the commit fails).
        self.refused_values: dict[bytes, int] = {}
        # After a refused batch librdkafka bumps the idempotent epoch by failing the next
        # transaction, whatever it holds.
        self.owes_epoch_bump = False
        # Every value of the open transaction, with its delivery report if it asked for one.
        self.all_reports: list[tuple[bytes, Callable[[Any, Any], None] | None]] = []
        # Delivery reports are served by poll() once this is set (the broker acknowledged).
        self.acknowledging = threading.Event()
        self.acknowledging.set()
        # init_transactions() returns once this is set (the coordinator answered).
        self.init_gate = threading.Event()
        self.init_gate.set()
        # (transaction number, topic, partition asked for) of every record produced.
        self.partitions: list[tuple[int, str, int]] = []

    def list_topics(self, topic: str, timeout: float) -> Any:
        from types import SimpleNamespace as NS

        return NS(topics={topic: NS(error=None, partitions=dict.fromkeys(range(TOPIC_PARTITIONS)))})

    def init_transactions(self, timeout: float) -> None:
        assert self.init_gate.wait(10), "init_transactions held for too long"
        self.initialised = True

    def begin_transaction(self) -> None:
        assert self.initialised and self.open is None
        self.open = []

    def produce(
        self,
        topic: str,
        value: bytes,
        key: bytes | None,
        partition: int = -1,
        on_delivery: Callable[[Any, Any], None] | None = None,
        timestamp: int = 0,
        headers: Any = None,
    ) -> None:
        """confluent-kafka's produce(), positional arguments in its order."""
        assert self.open is not None
        if self.produce_errors:
            raise self.produce_errors.pop(0)
        self.open.append((topic, key, value, headers))
        self.partitions.append((self.transactions, topic, partition))
        self.all_reports.append((value, on_delivery))
        if on_delivery is not None:
            self.reports.append(on_delivery)

    def commit_transaction(self, timeout: float) -> None:
        assert self.open is not None
        reports, self.all_reports = self.all_reports, []
        refused = [(v, r) for v, r in reports if v in self.refused_values]
        for value, report in refused:  # a commit flushes: every delivery report runs
            if report is not None:
                report(KafkaError(self.refused_values[value], "scripted"), None)
        if refused:
            self.owes_epoch_bump = True
            code = self.refused_values[refused[0][0]]
            raise kafka_error(code, txn_requires_abort=True)
        if self.owes_epoch_bump:
            self.owes_epoch_bump = False
            raise kafka_error(KafkaError.OUT_OF_ORDER_SEQUENCE_NUMBER, txn_requires_abort=True)
        if self.commit_errors:
            raise self.commit_errors.pop(0)
        self.committed += self.open
        self.open = None
        self.transactions += 1

    def abort_transaction(self, timeout: float) -> None:
        self.all_reports = []
        self.on_abort()
        if self.abort_error is not None:
            raise self.abort_error
        self.aborted += 1
        self.open = None

    def purge(self, *args: bool) -> None:
        pass

    def flush(self, timeout: float) -> int:
        return 0

    def poll(self, timeout: float) -> int:
        if not self.acknowledging.wait(timeout):
            return 0
        reports, self.reports = self.reports, []
        for report in reports:
            report(None, None)
        return len(reports)


def kafka_error(code: int, **flags: bool) -> KafkaException:
    return KafkaException(KafkaError(code, "scripted", **flags))


class Harness:
    def __init__(
        self,
        ack_timeout_s: float = 2.0,
        lanes: int = 1,
        writing_at_once: int = WRITING_AT_ONCE,
        key_header: bool = False,
    ) -> None:
        self.producers: list[FakeProducer] = []
        self.lanes: list[int] = []
        """The lane of each of `producers`."""
        # Keys-topic reads return once this is set.
        self.reads_open = threading.Event()
        self.reads_open.set()
        self.init_held: set[int] = set()
        # Values the "broker" refuses, with the error code, whichever producer writes them.
        self.refused_values: dict[bytes, int] = {}
        """Lanes whose next producer's init_transactions() waits for its `init_gate`."""
        self.key_reads: list[int] = []
        # What the keys topic holds beyond the ledger: (key, entry), found by the next read.
        self.committed_keys: list[tuple[str, KeyEntry]] = []
        self.ledger = KeyLedger(retention_ms=3_600_000)
        self.commits = 0
        """Transactions the writer reported committed."""
        self.writer = IngestWriter(
            self.make_producer,
            self.read_keys,
            KEYS_TOPIC,
            self.ledger,
            ack_timeout_s,
            lanes=lanes,
            on_committed=self.count_commit,
            writing_at_once=writing_at_once,
            key_header=key_header,
        )

    def count_commit(self) -> None:
        self.commits += 1

    def make_producer(self, lane: int) -> FakeProducer:
        producer = FakeProducer()
        producer.refused_values = self.refused_values
        if lane in self.init_held:
            producer.init_gate.clear()
        self.producers.append(producer)
        self.lanes.append(lane)
        return producer

    def read_keys(self, start: int) -> int:
        assert self.reads_open.wait(10), "a keys read held for too long"
        self.key_reads.append(start)
        for key, entry in self.committed_keys:
            self.ledger.add(key, entry)
        return start + len(self.committed_keys)

    def wait_ready(self) -> None:
        deadline = time.monotonic() + 5
        while not self.writer.ready:
            assert time.monotonic() < deadline, "the writer never became ready"
            time.sleep(0.01)

    def send(self, key: str | None, values: list[bytes], fingerprint: str = "fp") -> Answer:
        records = Records(list(values))
        request = IngestRequest("lines", "lines-topic", records, key, fingerprint)
        return self.writer.submit(request).result(timeout=10)


@pytest.fixture
def harness() -> Iterator[Harness]:
    h = Harness()
    h.writer.start()
    h.wait_ready()
    yield h
    h.writer.stop(5)


def test_a_request_is_written_in_one_transaction_with_its_key(harness: Harness) -> None:
    answer = harness.send("k1", [b"a", b"b"])
    assert (answer.outcome, answer.records) == ("written", 2)
    (producer,) = harness.producers
    data = [(t, v, h) for t, _, v, h in producer.committed if t == "lines-topic"]
    assert data == [("lines-topic", b"a", None), ("lines-topic", b"b", None)]  # no header
    (key_record,) = [(k, v) for t, k, v, _ in producer.committed if t == KEYS_TOPIC]
    assert key_record[0] == b"k1"
    assert KeyEntry.decode(key_record[1]).records == 2
    assert harness.ledger.get("k1") is not None


def test_with_key_header_every_record_carries_its_requests_key() -> None:
    harness = Harness(key_header=True)
    harness.writer.start()
    try:
        harness.wait_ready()
        assert harness.send("k1", [b"a", b"b"]).outcome == "written"
        assert harness.send(None, [b"c"]).outcome == "written"  # no key, no header
        (producer,) = harness.producers
        data = [(v, h) for t, _, v, h in producer.committed if t == "lines-topic"]
        header = [(KEY_HEADER, b"k1")]
        assert data == [(b"a", header), (b"b", header), (b"c", None)]
    finally:
        harness.writer.stop(5)


def test_a_retry_with_the_same_key_writes_nothing(harness: Harness) -> None:
    harness.send("k1", [b"a"])
    committed = len(harness.producers[0].committed)
    answer = harness.send("k1", [b"a"])
    assert (answer.outcome, answer.records) == ("duplicate", 1)
    assert len(harness.producers[0].committed) == committed


def test_a_key_reused_for_other_records_is_a_mismatch(harness: Harness) -> None:
    harness.send("k1", [b"a"], fingerprint="one")
    answer = harness.send("k1", [b"b"], fingerprint="two")
    assert answer.outcome == "mismatch" and "different request" in answer.detail


def test_requests_arriving_before_the_first_ack_join_the_transaction(harness: Harness) -> None:
    producer = harness.producers[0]
    producer.acknowledging.clear()  # the broker has not acknowledged anything yet
    first = harness.writer.submit(IngestRequest("lines", "t", Records([b"a"]), "k1", "f"))
    time.sleep(0.1)  # the first transaction is open, waiting for its first acknowledgement
    late = harness.writer.submit(IngestRequest("lines", "t", Records([b"b"]), "k2", "f"))
    time.sleep(0.1)
    producer.acknowledging.set()
    assert first.result(10).outcome == "written" and late.result(10).outcome == "written"
    assert producer.transactions == 1 and harness.commits == 1
    assert sorted(v for t, _, v, _ in producer.committed if t == "t") == [b"a", b"b"]
    assert harness.ledger.get("k2") is not None


def test_requests_without_keys_leave_no_key_record(harness: Harness) -> None:
    assert harness.send(None, [b"a"]).outcome == "written"
    assert [t for t, *_ in harness.producers[0].committed] == ["lines-topic"]


def test_a_cleanly_aborted_transaction_answers_503_and_keeps_the_producer(
    harness: Harness,
) -> None:
    producer = harness.producers[0]
    producer.commit_errors = [kafka_error(KafkaError.NOT_ENOUGH_REPLICAS, txn_requires_abort=True)]
    answer = harness.send("k1", [b"a"])
    assert answer.outcome == "unavailable" and "NOT_ENOUGH_REPLICAS" in answer.detail
    assert producer.aborted == 1 and producer.committed == [] and harness.commits == 0
    assert harness.ledger.get("k1") is None
    # Same producer, no re-read of the keys: the abort settled everything.
    assert harness.send("k1", [b"a"]).outcome == "written" and harness.commits == 1
    assert len(harness.producers) == 1 and harness.key_reads == [0]


def test_an_unknown_outcome_rebuilds_the_producer_and_rereads_the_keys_first() -> None:
    harness = Harness(ack_timeout_s=0.3)
    harness.writer.start()
    harness.wait_ready()
    try:
        first = harness.producers[0]
        # The commit times out: did it commit? Unknown, and no KIP-890 in librdkafka, so the
        # producer is neither aborted nor used again (an abort would be refused anyway).
        first.commit_errors = [kafka_error(KafkaError._TIMED_OUT, retriable=True)] * 1000
        first.abort_error = kafka_error(KafkaError._STATE)
        aborts: list[int] = []
        first.on_abort = lambda: aborts.append(1)
        # In truth it did commit: the keys topic holds k1 once it is read again.
        entry = KeyEntry("lines", "fp", 1, int(time.time() * 1000))
        harness.committed_keys.append(("k1", entry))
        answer = harness.send("k1", [b"a"])
        assert answer.outcome == "unavailable"
        assert aborts == []
        harness.wait_ready()
        assert len(harness.producers) == 2 and harness.producers[1].initialised
        assert harness.key_reads == [0, 0]  # read again from where the first read stopped
        retry = harness.send("k1", [b"a"])
        assert (retry.outcome, retry.records) == ("duplicate", 1)
        assert harness.producers[1].committed == []
    finally:
        harness.writer.stop(5)


def test_requests_are_refused_at_once_while_not_ready() -> None:
    harness = Harness()  # not started: no producer yet
    answer = harness.send("k1", [b"a"])
    assert answer.outcome == "unavailable" and "connecting" in answer.detail


def test_a_key_being_written_is_in_progress(harness: Harness) -> None:
    producer = harness.producers[0]
    # ~1 s of retriable commit errors (not a timeout, which would finish the producer)
    release = [kafka_error(KafkaError.COORDINATOR_LOAD_IN_PROGRESS, retriable=True)] * 20
    producer.commit_errors = list(release)
    request = IngestRequest("lines", "lines-topic", Records([b"a"]), "k1", "fp")
    first = harness.writer.submit(request)
    time.sleep(0.2)
    assert harness.writer.submit(request).result(timeout=1).outcome == "in_progress"
    assert first.result(timeout=10).outcome == "written"


def test_fencing_stops_the_writer(harness: Harness) -> None:
    producer = harness.producers[0]
    producer.commit_errors = [kafka_error(KafkaError._FENCED, fatal=True)]
    answer = harness.send("k1", [b"a"])
    assert answer.outcome == "unavailable" and "fenced" in answer.detail
    assert harness.writer.fenced and not harness.writer.healthy
    assert not harness.writer.ready  # /readyz 503: a balancer sends clients elsewhere
    assert harness.send("k2", [b"b"]).outcome == "unavailable"


def test_stop_writes_what_is_queued_then_refuses(harness: Harness) -> None:
    harness.writer.stop(5)
    assert harness.send("k9", [b"z"]).outcome == "unavailable"


@pytest.mark.parametrize(
    ("code", "outcome"),
    [(KafkaError.MSG_SIZE_TOO_LARGE, "too_large"), (KafkaError.INVALID_RECORD, "invalid")],
)
def test_a_request_kafka_refuses_is_found_alone_and_the_rest_of_its_group_is_written(
    harness: Harness, code: int, outcome: str
) -> None:
    producer = harness.producers[0]
    producer.acknowledging.clear()  # hold the first transaction open so that all three join it
    harness.refused_values[b"huge"] = code
    futures = [
        harness.writer.submit(IngestRequest("lines", "t", Records([v]), k, "f"))
        for v, k in ((b"a", "k1"), (b"huge", "k2"), (b"b", "k3"))
    ]
    time.sleep(0.1)
    producer.acknowledging.set()
    answers = [f.result(10).outcome for f in futures]
    assert answers == ["written", outcome, "written"]
    committed = [v for p in harness.producers for t, _, v, _ in p.committed if t == "t"]
    assert sorted(committed) == [b"a", b"b"]
    assert harness.ledger.get("k2") is None and harness.ledger.get("k3") is not None
    # The group's abort, then each request alone: only the culprit's transaction aborts again,
    # and after each refusal the next transaction has a new producer (no epoch bump owed).
    assert [p.aborted for p in harness.producers] == [1, 1, 0]
    assert sum(p.transactions for p in harness.producers) == 2


def test_after_a_refusal_the_next_group_of_several_requests_is_written(harness: Harness) -> None:
    harness.refused_values[b"huge"] = KafkaError.MSG_SIZE_TOO_LARGE
    refused = harness.send("k1", [b"huge"])
    assert refused.outcome == "too_large"
    harness.wait_ready()
    assert len(harness.producers) == 2  # the refusal's producer owed an epoch bump: replaced
    producer = harness.producers[1]
    producer.acknowledging.clear()  # hold the transaction open so that both requests join it
    futures = [
        harness.writer.submit(IngestRequest("lines", "t", Records([v]), k, "f"))
        for v, k in ((b"a", "k2"), (b"b", "k3"))
    ]
    time.sleep(0.1)
    producer.acknowledging.set()
    assert [f.result(10).outcome for f in futures] == ["written", "written"]
    assert sorted(v for t, _, v, _ in producer.committed if t == "t") == [b"a", b"b"]


def test_a_refused_record_without_a_delivery_report_is_found_alone(harness: Harness) -> None:
    # In a group only the first record is reported: the failed commit's code sends the request
    # back alone, where every record is reported and names it.
    harness.refused_values[b"huge"] = KafkaError.MSG_SIZE_TOO_LARGE
    assert harness.send("k1", [b"a", b"huge"]).outcome == "too_large"
    assert [p.aborted for p in harness.producers][:2] == [1, 1]  # the group, then alone
    assert harness.ledger.get("k1") is None
    harness.wait_ready()  # the refusal's producer is replaced
    assert harness.send("k2", [b"b"]).outcome == "written"
    committed = [v for p in harness.producers for t, _, v, _ in p.committed if t == "lines-topic"]
    assert committed == [b"b"]


def test_a_transaction_that_failed_before_its_commit_is_written_again_alone(
    harness: Harness,
) -> None:
    # The producer refusing records (_STATE) means the transaction already failed, perhaps for
    # a refused record whose report a group does not have: the request goes back alone.
    harness.producers[0].produce_errors = [kafka_error(KafkaError._STATE)]
    assert harness.send("k1", [b"a"]).outcome == "written"
    assert len(harness.producers) == 2  # the failed transaction's producer was replaced
    committed = [v for p in harness.producers for t, _, v, _ in p.committed if t == "lines-topic"]
    assert committed == [b"a"] and harness.ledger.get("k1") is not None


def test_past_the_keys_bound_a_new_key_is_429_and_no_key_is_forgotten() -> None:
    harness = Harness()
    harness.ledger.max_keys = 1
    harness.writer.start()
    harness.wait_ready()
    try:
        assert harness.send("k1", [b"a"]).outcome == "written"
        refused = harness.send("k2", [b"b"])
        assert refused.outcome == "too_many_keys" and (refused.retry_after_s or 0) >= 3000
        assert harness.send("k1", [b"a"]).outcome == "duplicate"  # still remembered
        assert harness.send(None, [b"c"]).outcome == "written"  # keyless requests go on
    finally:
        harness.writer.stop(5)


# --- two lanes ------------------------------------------------------------------------------


@pytest.fixture
def two_lanes() -> Iterator[Harness]:
    h = Harness(ack_timeout_s=0.5, lanes=2, writing_at_once=2)
    h.writer.start()
    h.wait_ready()
    yield h
    h.writer.stop(5)


def request(key: str, value: bytes) -> IngestRequest:
    return IngestRequest("lines", "t", Records([value]), key, "fp")


def test_not_ready_until_every_lane_has_fenced_its_id() -> None:
    """A lane's first init_transactions() fences an older endpoint's producer of its id; until
    every lane's has returned, that producer could still commit keys this one does not know."""
    harness = Harness(lanes=2)
    harness.init_held = {1}
    harness.writer.start()
    try:
        time.sleep(0.3)
        assert not harness.writer.ready
        assert harness.send("k1", [b"a"]).outcome == "unavailable"
        (held,) = [p for p, lane in zip(harness.producers, harness.lanes, strict=True) if lane]
        held.init_gate.set()
        harness.wait_ready()
        assert harness.send("k1", [b"a"]).outcome == "written"
    finally:
        harness.writer.stop(5)


def test_a_request_goes_to_an_idle_lane_not_into_a_waiting_transaction(
    two_lanes: Harness,
) -> None:
    for producer in two_lanes.producers:
        producer.acknowledging.clear()  # no acknowledgement from the broker yet
    first = two_lanes.writer.submit(request("k1", b"a"))
    time.sleep(0.1)
    (waiting,) = [p for p in two_lanes.producers if p.open is not None]
    (idle,) = [p for p in two_lanes.producers if p is not waiting]
    idle.acknowledging.set()
    second = two_lanes.writer.submit(request("k2", b"b"))
    assert second.result(5).outcome == "written"
    assert not first.done(), "the first request's transaction is still waiting"
    assert [v for t, _, v, _ in idle.committed if t == "t"] == [b"b"]
    waiting.acknowledging.set()
    assert first.result(5).outcome == "written"
    assert [v for t, _, v, _ in waiting.committed if t == "t"] == [b"a"]


def test_lanes_take_turns_and_the_lane_that_just_wrote_goes_last() -> None:
    """An id's next transaction has to wait for the markers of its last one: the lanes that
    waited longest write first, so each id rests while the others write."""
    harness = Harness(lanes=3, writing_at_once=2)
    harness.writer.start()
    try:
        harness.wait_ready()
        for number in range(7):
            assert harness.send(f"k{number}", [b"%d" % number]).outcome == "written"
        lane_of = {
            value: lane
            for producer, lane in zip(harness.producers, harness.lanes, strict=True)
            for topic, _, value, _ in producer.committed
            if topic == "lines-topic"
        }
        order = [lane_of[b"%d" % number] for number in range(7)]
        assert sorted(order[:3]) == [0, 1, 2], order
        assert order[3:] == order[:3] + order[:1], order
    finally:
        harness.writer.stop(5)


@pytest.mark.parametrize("at_once", [1, 2])
def test_no_more_lanes_write_at_once_than_allowed_the_rest_join_open_transactions(
    at_once: int,
) -> None:
    harness = Harness(lanes=3, writing_at_once=at_once)
    harness.writer.start()
    try:
        harness.wait_ready()
        for producer in harness.producers:
            producer.acknowledging.clear()  # no acknowledgement from the broker yet
        futures = []
        for number in range(3):
            futures.append(harness.writer.submit(request(f"k{number}", b"%d" % number)))
            time.sleep(0.1)
        writing = [p for p in harness.producers if p.open is not None]
        assert len(writing) == at_once, "one lane more began a transaction"
        values = sorted(v for p in writing for t, _, v, _ in p.open or [] if t == "t")
        assert values == [b"0", b"1", b"2"], "the third request did not join an open transaction"
        for producer in harness.producers:
            producer.acknowledging.set()
        assert [f.result(5).outcome for f in futures] == ["written"] * 3
        assert sum(p.transactions for p in harness.producers) == at_once
    finally:
        harness.writer.stop(5)


def test_a_key_of_an_unknown_outcome_is_unavailable_while_another_lane_writes(
    two_lanes: Harness,
) -> None:
    """The commit of k1 times out on one lane. Until that lane's new producer has settled the
    transaction and the keys were read again, the other lane must not write k1 again."""
    for producer in two_lanes.producers:
        producer.commit_errors = [kafka_error(KafkaError._TIMED_OUT, retriable=True)] * 1000
        producer.abort_error = kafka_error(KafkaError._STATE)
    two_lanes.reads_open.clear()  # the failed lane's new producer cannot read the keys yet
    # In truth the transaction did commit: the keys topic holds k1 once it is read again.
    two_lanes.committed_keys.append(("k1", KeyEntry("lines", "fp", 1, int(time.time() * 1000))))
    assert two_lanes.writer.submit(request("k1", b"a")).result(5).outcome == "unavailable"

    (survivor,) = [p for p in two_lanes.producers[:2] if p.open is None]
    survivor.commit_errors = []
    assert two_lanes.writer.ready, "one lane still writes"
    assert two_lanes.writer.submit(request("k2", b"b")).result(5).outcome == "written"
    retry = two_lanes.writer.submit(request("k1", b"a")).result(5)
    assert retry.outcome == "unavailable" and "being settled" in retry.detail

    two_lanes.reads_open.set()
    deadline = time.monotonic() + 5
    while (retry := two_lanes.writer.submit(request("k1", b"a")).result(5)).outcome != "duplicate":
        assert retry.outcome == "unavailable", retry
        assert time.monotonic() < deadline, "k1 stayed unsettled after the keys were read"
        time.sleep(0.05)
    assert all(v != b"a" for p in two_lanes.producers for t, _, v, _ in p.committed if t == "t")


def test_a_transactions_keyless_records_go_to_one_partition_and_the_next_to_the_next(
    harness: Harness,
) -> None:
    for n in range(TOPIC_PARTITIONS + 1):
        harness.send(f"k{n}", [b"a", b"b", b"c"])
    harness.writer.submit(
        IngestRequest("lines", "lines-topic", Records([b"d"], b"key"), "keyed", "f")
    ).result(10)
    producer = harness.producers[0]
    keyless = [(t, p) for t, topic, p in producer.partitions if topic == "lines-topic"]
    by_transaction: dict[int, set[int]] = {}
    for transaction, partition in keyless[:-1]:
        by_transaction.setdefault(transaction, set()).add(partition)
    chosen = [by_transaction[t] for t in sorted(by_transaction)]
    assert all(len(partitions) == 1 for partitions in chosen)  # one partition a transaction
    firsts = [min(partitions) for partitions in chosen]
    assert firsts[:TOPIC_PARTITIONS] == [
        (firsts[0] + i) % TOPIC_PARTITIONS for i in range(TOPIC_PARTITIONS)
    ]
    assert keyless[-1][1] == -1  # a keyed record goes where its key hashes
    assert {p for _, topic, p in producer.partitions if topic == KEYS_TOPIC} == {-1}
