"""`ensure_topic` and `CommittedTail.read_back` against fakes of the admin client and the consumer
(pure logic: the real broker paths run in tests/kafka)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pytest
from confluent_kafka import KafkaError, TopicPartition

from connectors.kafka_client import CommittedTail, TopicRole, TopicSpec, ensure_topic
from connectors.kafka_client import tail as tail_module
from service.errors import DStreamsError


class RoleError(DStreamsError):
    """The error a fake caller asks for."""


ROLE = TopicRole("test topic", RoleError)
# Every partition of a fake topic: led by broker 1, its only replica, in sync.
PARTITION = SimpleNamespace(leader=1, replicas=[1], isrs=[1])


class FakeAdmin:
    """A cluster of topics whose partitions all have leader 1 once created."""

    def __init__(self, topics: dict[str, int], error: KafkaError | None = None) -> None:
        self.partitions = dict(topics)
        self.error = error
        self.created: list[tuple[str, int]] = []
        self.grown: list[tuple[str, int]] = []

    def list_topics(self, timeout: float) -> Any:
        topics = {
            name: SimpleNamespace(partitions={p: PARTITION for p in range(count)}, error=self.error)
            for name, count in self.partitions.items()
        }
        return SimpleNamespace(topics=topics)

    def create_topics(self, topics: list[Any], operation_timeout: float) -> dict[str, Any]:
        (topic,) = topics
        self.created.append((topic.topic, topic.num_partitions))
        self.partitions[topic.topic] = topic.num_partitions
        return {topic.topic: SimpleNamespace(result=lambda timeout: None)}

    def create_partitions(self, requests: list[Any]) -> dict[str, Any]:
        (request,) = requests
        self.grown.append((request.topic, request.new_total_count))
        self.partitions[request.topic] = request.new_total_count
        return {request.topic: SimpleNamespace(result=lambda timeout: None)}


def test_a_missing_topic_is_created_and_waited_for() -> None:
    admin = FakeAdmin({})
    ensure_topic(admin, TopicSpec("t", 3, 1), ROLE, "refuse", timeout_s=1)
    assert admin.created == [("t", 3)] and admin.grown == []


@pytest.mark.parametrize(
    ("mismatch", "existing", "grown"),
    [("grow", 2, [("t", 4)]), ("grow", 6, []), ("keep", 2, []), ("keep", 6, [])],
)
def test_an_existing_topic_is_grown_only_when_asked_and_smaller(
    mismatch: Any, existing: int, grown: list[tuple[str, int]]
) -> None:
    admin = FakeAdmin({"t": existing})
    ensure_topic(admin, TopicSpec("t", 4, 1), ROLE, mismatch, timeout_s=1)
    assert admin.created == [] and admin.grown == grown


def test_a_grown_topic_is_kept_without_a_warning_but_a_kept_mismatch_warns(
    caplog: pytest.LogCaptureFixture,
) -> None:
    ensure_topic(FakeAdmin({"t": 6}), TopicSpec("t", 4, 1), ROLE, "grow", timeout_s=1)
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    ensure_topic(FakeAdmin({"t": 6}), TopicSpec("t", 4, 1), ROLE, "keep", timeout_s=1)
    assert "test topic t has 6 partitions, configured 4; kept" in caplog.text


def test_a_topic_of_another_size_is_refused_with_the_callers_error() -> None:
    with pytest.raises(RoleError, match="test topic 't' has 2 partitions; expected exactly 1"):
        ensure_topic(FakeAdmin({"t": 2}), TopicSpec("t", 1, 1), ROLE, "refuse", timeout_s=1)


def test_a_topic_the_client_may_not_describe_is_refused() -> None:
    admin = FakeAdmin({"t": 1}, error=KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED))
    with pytest.raises(RoleError, match="cannot describe test topic 't'.*ACLs"):
        ensure_topic(admin, TopicSpec("t", 1, 1), ROLE, "keep", timeout_s=1)
    assert admin.created == []


class Message:
    def __init__(self, partition: int, offset: int, error: KafkaError | None = None) -> None:
        self._partition, self._offset, self._error = partition, offset, error

    def error(self) -> KafkaError | None:
        return self._error

    def partition(self) -> int:
        return self._partition

    def offset(self) -> int:
        return self._offset

    def value(self) -> bytes:
        return b"%d" % self._offset


class FakeConsumer:
    """Partitions whose committed records sit at the given offsets (the rest: control records)."""

    def __init__(self, records: dict[int, list[int]], ends: dict[int, int]) -> None:
        self.records, self.ends = records, ends
        self.queue: list[Message] = []
        self.reads: list[dict[int, int]] = []

    def assign(self, partitions: list[TopicPartition]) -> None:
        self.reads.append({tp.partition: tp.offset for tp in partitions})
        for tp in partitions:
            after = [o for o in self.records[tp.partition] if o >= tp.offset]
            self.queue += [Message(tp.partition, o) for o in after]
            eof = KafkaError(KafkaError._PARTITION_EOF)
            self.queue.append(Message(tp.partition, self.ends[tp.partition], eof))

    def poll(self, timeout: float) -> Message | None:
        return self.queue.pop(0) if self.queue else None

    def unassign(self) -> None:
        self.queue = []


def fake_tail(monkeypatch: pytest.MonkeyPatch, consumer: FakeConsumer) -> CommittedTail:
    monkeypatch.setattr(tail_module, "new_consumer", lambda conf, settings: consumer)
    return CommittedTail({}, "group", ROLE)


def read_back(
    tail: CommittedTail, ends: dict[int, tuple[int, int]], enough: Callable[[Any], bool]
) -> dict[int, list[int]]:
    return tail.read_back(
        "t", ends, window=4, growth=2, decode=Message.offset, enough=enough, timeout_s=1
    )


def test_read_back_widens_its_window_until_it_finds_enough(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    consumer = FakeConsumer({0: [3, 20, 22]}, {0: 40})
    tail = fake_tail(monkeypatch, consumer)

    found = read_back(tail, {0: (0, 40)}, enough=bool)

    # [36, 40), then [28, 36), then [12, 28): the first window holding a record.
    assert [read[0] for read in consumer.reads] == [36, 28, 12]
    assert found == {0: [20, 22]}


def test_read_back_stops_at_the_low_offset_and_skips_empty_partitions(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    consumer = FakeConsumer({0: [5, 7], 1: []}, {0: 9, 1: 4})
    tail = fake_tail(monkeypatch, consumer)

    found = read_back(tail, {0: (5, 9), 1: (4, 4)}, enough=lambda records: False)

    assert consumer.reads == [{0: 5}]
    assert found == {0: [5, 7], 1: []}


class SilentConsumer(FakeConsumer):
    """A consumer whose fetches bring nothing at all."""

    def assign(self, partitions: list[TopicPartition]) -> None:
        self.reads.append({tp.partition: tp.offset for tp in partitions})


class RefusedConsumer(FakeConsumer):
    """A consumer whose fetches fail: the client may not read the topic."""

    def assign(self, partitions: list[TopicPartition]) -> None:
        self.queue.append(Message(0, -1, KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED)))


def test_an_error_the_caller_gives_up_on_raises_its_error(monkeypatch: pytest.MonkeyPatch) -> None:
    tail = fake_tail(monkeypatch, RefusedConsumer({0: []}, {0: 10}))

    with pytest.raises(RoleError, match="reading test topic 't', partitions \\[0\\] failed"):
        tail.read("t", {0: (0, 10)}, timeout_s=1, give_up=lambda error: True)


def test_no_answer_within_the_timeout_raises_the_callers_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    tail = fake_tail(monkeypatch, SilentConsumer({0: []}, {0: 10}))

    with pytest.raises(RoleError, match="no answer within"):
        tail.read("t", {0: (0, 10)}, timeout_s=0)


def test_a_topic_waited_for_in_sync_fails_while_a_replica_lags() -> None:
    admin = FakeAdmin({"t": 1})  # one replica in sync, two wanted
    with pytest.raises(RoleError, match="in-sync replicas after .*2 in sync each"):
        ensure_topic(admin, TopicSpec("t", 1, 2), ROLE, "keep", timeout_s=0.2, all_in_sync=True)
    ensure_topic(admin, TopicSpec("t", 1, 2), ROLE, "keep", timeout_s=0.2)


class SlowConsumer(FakeConsumer):
    """Each record takes a second of a fake clock to arrive; a poll whose time is up is empty."""

    def __init__(self, records: dict[int, list[int]], ends: dict[int, int]) -> None:
        super().__init__(records, ends)
        self.now = 0.0

    def poll(self, timeout: float) -> Message | None:
        if timeout < 1:
            self.now += timeout
            return None
        self.now += 1
        return super().poll(timeout)


def test_a_stream_while_progressing_outlasts_the_timeout_of_a_whole_read(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    consumer = SlowConsumer({0: list(range(10))}, {0: 10})
    tail = fake_tail(monkeypatch, consumer)
    monkeypatch.setattr(tail_module.time, "monotonic", lambda: consumer.now)

    with pytest.raises(RoleError, match="no answer within 3 s"):
        tail.read("t", {0: (0, 10)}, timeout_s=3)

    consumer.now = 0.0
    streamed = tail.stream("t", {0: (0, 10)}, timeout_s=3, while_progressing=True)
    assert [message.offset() for message in streamed] == list(range(10))
