"""Kafka transactions as the sinks and the journal rely on them, on 1 broker.

See docs/architecture.md, "The journal" and "Sinks".
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

# A transaction left open by a failed test blocks read_committed readers until it times out.
TRANSACTION_TIMEOUT_MS = 10_000
FENCING_CODES = {KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH}


def _transactional_producer(bootstrap: str, transactional_id: str) -> Producer:
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": transactional_id,
            "transaction.timeout.ms": TRANSACTION_TIMEOUT_MS,
        }
    )
    producer.init_transactions(30)
    return producer


def _read_to_end(bootstrap: str, topic: str, isolation: str) -> list[bytes]:
    """Every value in partition 0 of `topic` visible at `isolation`, read up to its end."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"{topic}_reader",
            "isolation.level": isolation,
            "enable.partition.eof": True,
            "enable.auto.commit": False,
        }
    )
    consumer.assign([TopicPartition(topic, 0, 0)])
    values: list[bytes] = []
    try:
        for _ in range(100):
            message = consumer.poll(1.0)
            if message is None:
                continue
            if message.error() is not None:
                if message.error().code() == KafkaError._PARTITION_EOF:
                    return values
                raise KafkaException(message.error())
            values.append(message.value())
    finally:
        consumer.close()
    pytest.fail(f"did not reach the end of {topic}; read {values!r}")


def test_aborted_transaction_is_invisible_and_committed_one_visible(
    kafka_bootstrap: str, make_topic: Callable[..., str], unique_name: str
) -> None:
    topic = make_topic(kafka_bootstrap, unique_name)
    producer = _transactional_producer(kafka_bootstrap, f"{unique_name}_tx")

    producer.begin_transaction()
    producer.produce(topic, b"aborted-1")
    producer.produce(topic, b"aborted-2")
    # Sent before the abort: librdkafka would otherwise drop them locally and never write them.
    assert producer.flush(30) == 0
    producer.abort_transaction(30)
    producer.begin_transaction()
    producer.produce(topic, b"committed-1")
    producer.produce(topic, b"committed-2")
    producer.commit_transaction(30)

    committed = _read_to_end(kafka_bootstrap, topic, "read_committed")
    assert committed == [b"committed-1", b"committed-2"]
    # The aborted records were written: only the isolation level hides them.
    assert _read_to_end(kafka_bootstrap, topic, "read_uncommitted") == [
        b"aborted-1",
        b"aborted-2",
        b"committed-1",
        b"committed-2",
    ]


def test_offsets_sent_to_a_transaction_are_committed_only_with_it(
    kafka_bootstrap: str, make_topic: Callable[..., str], unique_name: str
) -> None:
    source = make_topic(kafka_bootstrap, f"{unique_name}_in")
    sink = make_topic(kafka_bootstrap, f"{unique_name}_out")
    group = f"{unique_name}_g"
    plain = Producer({"bootstrap.servers": kafka_bootstrap})
    for i in range(10):
        plain.produce(source, f"in-{i}".encode())
    assert plain.flush(30) == 0

    consumer = Consumer(
        {
            "bootstrap.servers": kafka_bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
        }
    )
    producer = _transactional_producer(kafka_bootstrap, f"{unique_name}_tx")
    try:
        consumer.subscribe([source])
        inputs = _poll_values(consumer, 10)
        positions = consumer.position(consumer.assignment())

        _process_in_transaction(producer, consumer, sink, inputs, positions)
        producer.abort_transaction(30)
        assert _committed_offset(consumer, source) < 0  # nothing committed for the group yet

        _process_in_transaction(producer, consumer, sink, inputs, positions)
        producer.commit_transaction(30)
        assert _committed_offset(consumer, source) == 10
    finally:
        consumer.close()
    assert _read_to_end(kafka_bootstrap, sink, "read_committed") == [
        f"out-{i}".encode() for i in range(10)
    ]


def _poll_values(consumer: Consumer, count: int) -> list[bytes]:
    values: list[bytes] = []
    for _ in range(60):
        message = consumer.poll(1.0)
        if message is None:
            continue
        assert message.error() is None, message.error()
        values.append(message.value())
        if len(values) == count:
            return values
    pytest.fail(f"expected {count} records, got {len(values)}")


def _process_in_transaction(
    producer: Producer,
    consumer: Consumer,
    sink: str,
    inputs: list[bytes],
    positions: list[TopicPartition],
) -> None:
    producer.begin_transaction()
    for value in inputs:
        producer.produce(sink, value.replace(b"in-", b"out-"))
    producer.send_offsets_to_transaction(positions, consumer.consumer_group_metadata(), 30)


def _committed_offset(consumer: Consumer, topic: str) -> int:
    (committed,) = consumer.committed([TopicPartition(topic, 0)], timeout=30)
    offset: int = committed.offset
    return offset


def test_a_second_producer_with_the_same_transactional_id_fences_the_first(
    kafka_bootstrap: str, make_topic: Callable[..., str], unique_name: str
) -> None:
    topic = make_topic(kafka_bootstrap, unique_name)
    transactional_id = f"{unique_name}_tx"
    zombie = _transactional_producer(kafka_bootstrap, transactional_id)
    zombie.begin_transaction()
    zombie.produce(topic, b"from-zombie")
    assert zombie.flush(30) == 0

    # Initialising the new producer bumps the epoch and aborts the zombie's open transaction.
    successor = _transactional_producer(kafka_bootstrap, transactional_id)

    with pytest.raises(KafkaException) as raised:
        zombie.produce(topic, b"from-zombie-after-fencing")
        zombie.commit_transaction(30)
    error = raised.value.args[0]
    assert error.code() in FENCING_CODES, error
    assert error.fatal(), error

    successor.begin_transaction()
    successor.produce(topic, b"from-successor")
    successor.commit_transaction(30)
    assert _read_to_end(kafka_bootstrap, topic, "read_committed") == [b"from-successor"]
