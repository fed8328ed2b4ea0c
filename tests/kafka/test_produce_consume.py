"""An idempotent producer's records come back exactly once and in order (1 broker)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from confluent_kafka import Consumer, KafkaError, Producer

RECORDS = 2_000


def test_idempotent_producer_records_are_read_back_exactly(
    kafka_bootstrap: str, make_topic: Callable[..., str], unique_name: str
) -> None:
    topic = make_topic(kafka_bootstrap, unique_name, partitions=3)
    sent = [(f"k{i % 17}".encode(), f"v{i}".encode()) for i in range(RECORDS)]

    errors: list[KafkaError] = []
    producer = Producer(
        {"bootstrap.servers": kafka_bootstrap, "enable.idempotence": True, "linger.ms": 5}
    )
    for key, value in sent:
        producer.produce(topic, value, key, on_delivery=lambda err, _msg: _collect(errors, err))
    assert producer.flush(30) == 0
    assert errors == []

    received = _consume(kafka_bootstrap, topic, f"{unique_name}_g", RECORDS)
    assert sorted(received) == sorted(sent)
    # Per key (hence per partition) the order of sending is kept.
    for key in {k for k, _ in sent}:
        assert [v for k, v in received if k == key] == [v for k, v in sent if k == key]


def _collect(errors: list[KafkaError], err: KafkaError | None) -> None:
    if err is not None:
        errors.append(err)


def _consume(bootstrap: str, topic: str, group: str, expected: int) -> list[tuple[Any, Any]]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe([topic])
    received: list[tuple[Any, Any]] = []
    try:
        # Read past the expected count for a moment, so a duplicate would be noticed.
        idle_polls = 0
        while len(received) < expected or idle_polls < 3:
            message = consumer.poll(1.0)
            if message is None:
                idle_polls += 1
                assert idle_polls < 30, f"only {len(received)} of {expected} records arrived"
                continue
            assert message.error() is None, message.error()
            received.append((message.key(), message.value()))
    finally:
        consumer.close()
    return received
