"""A transaction commit that times out because the broker is paused (SIGSTOP by its PID) is
fatal for its producer: a fresh producer with the same transactional.id takes a new epoch before
anything more is written, so no record of the timed-out transaction can land in the next one
(confluent-kafka lacks KIP-890; `connectors.kafka_client.transactions`).

The broker is a local one of this module's own, since the test stops its process.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition

import sinks.kafka
from connectors.kafka_client import (
    CommitTimedOut,
    commit_transaction,
    discard,
    new_transactional_producer,
    reinitialised,
)
from service.dev.brokers import create_topic
from service.dev.kafka_cluster import LocalKafkaCluster
from sinks.base import BatchKey
from sinks.kafka import KafkaSink, close_clients

COMMIT_TIMEOUT_S = 3.0
TRANSACTION_TIMEOUT_MS = 60_000
OLD, NEW = 200, 50  # records of the timed-out transaction, and of the next one


@pytest.fixture(scope="module")
def paused_cluster() -> Iterator[LocalKafkaCluster]:
    with LocalKafkaCluster(brokers=1) as cluster:
        yield cluster


@contextmanager
def broker_paused(cluster: LocalKafkaCluster) -> Iterator[None]:
    """The broker process stopped (SIGSTOP) inside the block, continued (SIGCONT) after it."""
    (pid,) = cluster.broker_pids
    os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(pid, signal.SIGCONT)


def read_committed(bootstrap: str, topic: str) -> list[tuple[int, bytes]]:
    """(offset, value) of every record a read_committed consumer sees in partition 0."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"{topic}_verifier",
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
            "enable.auto.commit": False,
        }
    )
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        seen: list[tuple[int, bytes]] = []
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            message = consumer.poll(1.0)
            if message is None:
                continue
            if message.error():
                if message.error().code() == -191:  # _PARTITION_EOF: caught up
                    return seen
                raise AssertionError(message.error())
            seen.append((message.offset(), message.value()))
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0))
        msg = (
            f"{topic}: read_committed saw {len(seen)} records and no end of partition within "
            f"120 s (offsets {low}..{high}): a transaction is still open there"
        )
        raise AssertionError(msg)
    finally:
        consumer.close()


@pytest.mark.timeout(240)
def test_the_next_transaction_holds_no_record_of_the_timed_out_one(
    paused_cluster: LocalKafkaCluster, unique_name: str
) -> None:
    bootstrap = paused_cluster.bootstrap_servers
    topic = create_topic(bootstrap, f"{unique_name}_out", 1, 1)
    conf = {"bootstrap.servers": bootstrap}
    txn_id = f"{unique_name}.producer"

    def make() -> Any:
        return new_transactional_producer(conf, txn_id, TRANSACTION_TIMEOUT_MS)

    old = reinitialised(make, 30)
    old.begin_transaction()
    for n in range(OLD // 2):  # half on the broker before it stops ...
        old.produce(topic, f"old-{n}".encode(), partition=0)
    old.flush(30)
    with broker_paused(paused_cluster), pytest.raises(CommitTimedOut):
        for n in range(OLD // 2, OLD):  # ... half still queued in the client when it does
            old.produce(topic, f"old-{n}".encode(), partition=0)
        commit_transaction(old, COMMIT_TIMEOUT_S, "the old transaction")
    discard(old)

    new = reinitialised(make, 60)  # a new epoch: the old transaction is settled first
    new.begin_transaction()
    for n in range(NEW):
        new.produce(topic, f"new-{n}".encode(), partition=0)
    commit_transaction(new, 30, "the next transaction")
    new.flush(5)

    records = read_committed(bootstrap, topic)
    olds = [offset for offset, value in records if value.startswith(b"old-")]
    news = [offset for offset, value in records if value.startswith(b"new-")]
    assert sorted(v for _, v in records if v.startswith(b"new-")) == sorted(
        f"new-{n}".encode() for n in range(NEW)
    )
    assert len(olds) in (0, OLD), f"the timed-out transaction is partly visible: {len(olds)}"
    assert not olds or max(olds) < min(news), "a record of the timed-out one is in the next one"
    print(f"timed-out transaction: {'committed' if olds else 'aborted'} ({len(olds)} records)")


@pytest.mark.timeout(240)
def test_the_kafka_sink_replaces_a_producer_whose_commit_timed_out(
    paused_cluster: LocalKafkaCluster, unique_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The sink's commit is held up by a paused broker once; the write still commits its rows
    exactly once, and the next batch's transaction holds only its own rows."""
    bootstrap = paused_cluster.bootstrap_servers
    close_clients()
    sink = KafkaSink(
        {"bootstrap.servers": bootstrap},
        f"{unique_name}_out",
        partitions=1,
        transaction_timeout_ms=5_000,  # the commit's own timeout: 5 s
    )
    sink.setup("app", "out")
    paused_once = threading.Event()
    real_commit = sinks.kafka.commit_transaction

    def commit_with_the_broker_paused(producer: Any, timeout_s: float, what: str) -> None:
        if paused_once.is_set():
            return real_commit(producer, timeout_s, what)
        paused_once.set()
        with broker_paused(paused_cluster):
            return real_commit(producer, timeout_s, what)

    monkeypatch.setattr(sinks.kafka, "commit_transaction", commit_with_the_broker_paused)
    try:
        first = sink.write(BatchKey("app", "out", 1000, 0), [f"a{n}" for n in range(OLD)])
        second = sink.write(BatchKey("app", "out", 2000, 0), [f"b{n}" for n in range(NEW)])
    finally:
        close_clients()

    assert paused_once.is_set()
    assert first.rows in (0, OLD) and second.rows == NEW
    values = [value for _, value in read_committed(bootstrap, sink.topic)]
    expected = sorted(f'"{p}{n}"'.encode() for p, k in (("a", OLD), ("b", NEW)) for n in range(k))
    assert sorted(values) == expected
