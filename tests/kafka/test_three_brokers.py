"""Durability on a 3-broker cluster with acks=all and min.insync.replicas=2.

One broker may die without losing or duplicating an acknowledged record; with two of three gone,
writes must fail visibly instead of being acknowledged and lost.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition

from service.dev.kafka_cluster import LocalKafkaCluster

RECORDS = 50_000
PARTITIONS = 3
# Errors a producer reports when the cluster cannot take an acks=all write in time.
UNAVAILABLE_CODES = {
    KafkaError._MSG_TIMED_OUT,
    KafkaError._TIMED_OUT,
    KafkaError.REQUEST_TIMED_OUT,
    KafkaError.NOT_ENOUGH_REPLICAS,
    KafkaError.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
    KafkaError.NOT_LEADER_FOR_PARTITION,
    KafkaError.LEADER_NOT_AVAILABLE,
}


@dataclass
class Deliveries:
    """What the broker acknowledged, and what it refused, per record id."""

    acked: list[int] = field(default_factory=list)
    failed: list[tuple[int, KafkaError]] = field(default_factory=list)

    def report(self, err: KafkaError | None, value: bytes) -> None:
        if err is None:
            self.acked.append(int(value))
        else:
            self.failed.append((int(value), err))


def _producer(bootstrap: str, delivery_timeout_ms: int) -> Producer:
    return Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "enable.idempotence": True,
            "linger.ms": 5,
            "delivery.timeout.ms": delivery_timeout_ms,
            "request.timeout.ms": min(delivery_timeout_ms, 5_000),
        }
    )


def _produce(producer: Producer, topic: str, ids: range, deliveries: Deliveries) -> None:
    for i in ids:
        while True:
            try:
                producer.produce(
                    topic,
                    str(i).encode(),
                    on_delivery=lambda err, msg: deliveries.report(err, msg.value()),
                )
                break
            except BufferError:
                producer.poll(0.05)  # local queue full: let deliveries drain it
        producer.poll(0)


def _read_all(bootstrap: str, topic: str) -> Counter[int]:
    """Every record id in every partition of `topic`, counted, read up to the end."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"{topic}_verifier",
            "enable.partition.eof": True,
            "enable.auto.commit": False,
        }
    )
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
    seen: Counter[int] = Counter()
    at_end: set[int] = set()
    try:
        for _ in range(1_000_000):
            message = consumer.poll(1.0)
            if message is None:
                continue
            if message.error() is not None:
                assert message.error().code() == KafkaError._PARTITION_EOF, message.error()
                at_end.add(message.partition())
                if len(at_end) == PARTITIONS:
                    return seen
                continue
            seen[int(message.value())] += 1
    finally:
        consumer.close()
    pytest.fail(f"did not reach the end of {topic}")


def test_acknowledged_writes_survive_a_broker_killed_mid_stream(
    kafka_cluster3: LocalKafkaCluster, make_topic: Callable[..., str], unique_name: str
) -> None:
    bootstrap = kafka_cluster3.bootstrap_servers
    topic = make_topic(bootstrap, unique_name, partitions=PARTITIONS, replication=3)
    deliveries = Deliveries()
    # Long enough to ride out fencing of the dead broker (~4 s) and leader election.
    producer = _producer(bootstrap, delivery_timeout_ms=60_000)

    try:
        _produce(producer, topic, range(RECORDS // 2), deliveries)
        while len(deliveries.acked) < RECORDS // 4:
            producer.poll(0.05)
        kafka_cluster3.kill_broker(1)  # while about half of the records are still unacknowledged
        acked_at_kill = len(deliveries.acked)
        _produce(producer, topic, range(RECORDS // 2, RECORDS), deliveries)
        assert producer.flush(90) == 0
    finally:
        kafka_cluster3.restart_broker(1)

    assert deliveries.failed == []
    # The kill came mid-stream: at most the first half had been acknowledged by then...
    assert RECORDS // 4 <= acked_at_kill <= RECORDS // 2
    # ...and producing resumed: every record, before and after the kill, was acknowledged.
    assert sorted(deliveries.acked) == list(range(RECORDS))
    seen = _read_all(bootstrap, topic)
    assert [i for i, n in seen.items() if n > 1] == []
    assert sorted(seen) == list(range(RECORDS))


def test_acks_all_writes_fail_clearly_with_two_of_three_brokers_down(
    kafka_cluster3: LocalKafkaCluster, make_topic: Callable[..., str], unique_name: str
) -> None:
    bootstrap = kafka_cluster3.bootstrap_servers
    topic = make_topic(bootstrap, unique_name, partitions=PARTITIONS, replication=3)
    deliveries = Deliveries()
    producer = _producer(bootstrap, delivery_timeout_ms=5_000)

    kafka_cluster3.kill_broker(0)
    kafka_cluster3.kill_broker(1)
    try:
        _produce(producer, topic, range(100), deliveries)
        assert producer.flush(30) == 0  # every record got its delivery report
    finally:
        kafka_cluster3.restart_brokers(0, 1)

    assert deliveries.acked == []
    assert len(deliveries.failed) == 100  # none silently dropped
    codes = {err.code() for _, err in deliveries.failed}
    assert codes <= UNAVAILABLE_CODES, codes

    # Back to three brokers, the same topic takes acks=all writes again.
    after = Deliveries()
    recovered = _producer(bootstrap, delivery_timeout_ms=30_000)
    _produce(recovered, topic, range(100, 110), after)
    assert recovered.flush(30) == 0
    assert sorted(after.acked) == list(range(100, 110))
