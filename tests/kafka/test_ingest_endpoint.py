"""The ingest endpoint against a real broker: what a 200 means, what a refusal leaves behind, and
idempotency keys that outlive the endpoint process.

Each test runs the endpoint in this process (`IngestService` on a free port) and reads the topic
back `read_committed`, as the driver does. The 503 answers with brokers down are tested on three
brokers in tests/kafka/test_replication.py.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, TopicPartition

from connectors.kafka_client import end_offsets
from service.config.settings import Settings
from service.dev.ingest_client import IngestClient
from service.ingest.app import IngestService, ingest_alongside
from service.ingest.writer import KEY_HEADER

PARTITIONS = 2


def settings_for(bootstrap: str, topic: str, app_id: str, **ingest: Any) -> Settings:
    return Settings.model_validate(
        {
            "app_id": app_id,
            "job": "examples.wordcount:build",
            "kafka": {"bootstrap_servers": bootstrap, "require_replication": False},
            "sources": {"events": {"topics": [topic]}},
            "ingest": {"host": "127.0.0.1", "port": 0, "ack_timeout_ms": 10_000, **ingest},
        }
    )


@dataclass
class Running:
    service: IngestService
    client: IngestClient
    topic: str

    def stop(self) -> None:
        self.client.close()
        self.service.stop()


def start(settings: Settings, topic: str) -> Running:
    service = IngestService(settings)
    port = service.start()
    running = Running(service, IngestClient("127.0.0.1", port), topic)
    # Requests are answered 503 until the producer is ready: wait for it, as a load balancer would.

    deadline = time.monotonic() + 60
    while not (service.writer and service.writer.ready):
        assert time.monotonic() < deadline, "the ingest writer did not become ready"
        time.sleep(0.05)
    return running


@pytest.fixture
def endpoint(
    kafka_bootstrap: str, make_topic: Callable[..., str], unique_name: str
) -> Iterator[tuple[Running, Callable[[], Running]]]:
    """The endpoint on a fresh topic, and a function that starts another one of the same app."""
    topic = make_topic(kafka_bootstrap, unique_name, partitions=PARTITIONS)
    settings = settings_for(kafka_bootstrap, topic, unique_name.replace("_", "-")[:40])
    started = [start(settings, topic)]

    def another() -> Running:
        started.append(start(settings, topic))
        return started[-1]

    try:
        yield started[0], another
    finally:
        for running in started:
            running.stop()


def read_all(bootstrap: str, topic: str, isolation: str = "read_committed") -> list[Any]:
    """Every record of `topic` visible at `isolation`."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"{topic}-reader",
            "isolation.level": isolation,
            "enable.partition.eof": True,
            "enable.auto.commit": False,
        }
    )
    try:
        import time

        deadline = time.monotonic() + 30
        ends = {
            p: end_offsets(consumer, TopicPartition(topic, p), deadline)[1]
            for p in range(PARTITIONS)
        }
        pending = {p for p, end in ends.items() if end > 0}
        consumer.assign([TopicPartition(topic, p, 0) for p in pending])
        records = []
        while pending:
            assert time.monotonic() < deadline, f"did not reach the end of {topic}"
            message = consumer.poll(1.0)
            if message is None:
                continue
            if message.error() is not None:
                assert message.error().code() == KafkaError._PARTITION_EOF, message.error()
                pending.discard(message.partition())
                continue
            records.append(message)
            if message.offset() + 1 >= ends[message.partition()]:
                pending.discard(message.partition())
        return records
    finally:
        consumer.close()


def read_committed(bootstrap: str, topic: str, count: int) -> list[Any]:
    """The topic's committed records once there are at least `count`: a commit is durable when
    it returns, and visible to read_committed readers a moment later (transaction markers)."""
    deadline = time.monotonic() + 30
    while True:
        records = read_all(bootstrap, topic)
        if len(records) >= count or time.monotonic() > deadline:
            return records
        time.sleep(0.1)


def high_watermarks(bootstrap: str, topic: str) -> list[int]:
    """Every partition's end, aborted and open transactions included."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{topic}-marks"})
    try:
        import time

        deadline = time.monotonic() + 30
        return [
            end_offsets(consumer, TopicPartition(topic, p), deadline)[1] for p in range(PARTITIONS)
        ]
    finally:
        consumer.close()


def lines(*documents: object) -> bytes:
    return b"".join(json.dumps(d).encode() + b"\n" for d in documents)


def test_acknowledged_records_are_committed_keyed_and_tagged(
    kafka_bootstrap: str, endpoint: tuple[Running, Any]
) -> None:
    running, _ = endpoint
    body = lines(*({"id": i, "user": f"u{i % 3}"} for i in range(50)))
    reply = running.client.post("events", body, key="batch-1", query="?key_field=user")
    assert (reply.status, reply.body) == (200, {"records": 50, "duplicate": False})

    records = read_committed(kafka_bootstrap, running.topic, 50)
    assert sorted(json.loads(m.value())["id"] for m in records) == list(range(50))
    assert {m.key() for m in records} == {b"u0", b"u1", b"u2"}
    # Keyed records stay in order per key (one partition per key).
    for user in (b"u0", b"u1", b"u2"):
        ids = [json.loads(m.value())["id"] for m in records if m.key() == user]
        assert ids == sorted(ids)
    assert not any(KEY_HEADER in dict(m.headers() or []) for m in records)  # ingest.key_header off


def test_a_retry_is_written_once_even_by_a_new_endpoint_process(
    kafka_bootstrap: str, endpoint: tuple[Running, Callable[[], Running]]
) -> None:
    first, another = endpoint
    body = lines(*({"id": i} for i in range(20)))
    assert first.client.post("events", body, key="k-1").status == 200
    again = first.client.post("events", body, key="k-1")
    assert (again.status, again.body) == (200, {"records": 20, "duplicate": True})
    # A second endpoint of the same app fences the first and knows its keys from the keys topic.
    second = another()
    retried = second.client.post("events", body, key="k-1")
    assert (retried.status, retried.body) == (200, {"records": 20, "duplicate": True})
    assert second.client.post("events", lines({"id": 99}), key="k-2").status == 200

    records = read_committed(kafka_bootstrap, first.topic, 21)
    ids = sorted(json.loads(m.value())["id"] for m in records)
    assert ids == [*range(20), 99]
    # The fenced first endpoint never answers 200 again.
    late = first.client.post("events", lines({"id": 100}), key="k-3")
    assert late.status == 503
    assert first.service.fenced


def test_a_key_reused_for_different_records_is_refused(endpoint: tuple[Running, Any]) -> None:
    running, _ = endpoint
    assert running.client.post("events", lines({"id": 1}), key="k").status == 200
    reply = running.client.post("events", lines({"id": 2}), key="k")
    assert reply.status == 422 and "different request" in str(reply.body["error"])


def test_refused_requests_write_nothing(
    kafka_bootstrap: str, endpoint: tuple[Running, Any]
) -> None:
    running = endpoint[0]
    before = high_watermarks(kafka_bootstrap, running.topic)
    good = lines(*({"id": i} for i in range(10)))
    malformed = good + b'{"id": 10, "broken\n' + lines({"id": 11})
    reply = running.client.post("events", malformed, key="bad-1")
    assert reply.status == 400 and "line 11 is not valid JSON" in str(reply.body["error"])
    missing_key = running.client.post("events", good + b"{}\n", query="?key_field=id")
    assert missing_key.status == 400 and "line 11 has no field 'id'" in str(missing_key.body)
    too_big = running.client.post("events", b'"' + b"x" * 1_000_100 + b'"\n')
    assert too_big.status == 413 and "at most 1000000" in str(too_big.body["error"])
    too_many = running.client.post("events", b"1\n" * 10_001)
    assert too_many.status == 413 and "more than 10000 records" in str(too_many.body["error"])
    body_too_big = running.client.post("events", b"1\n" * (2 << 21))
    assert body_too_big.status == 413 and "at most 4194304" in str(body_too_big.body["error"])
    # Nothing was even attempted: not one record, committed or aborted, reached a partition.
    assert high_watermarks(kafka_bootstrap, running.topic) == before
    # The key of a refused request stays free for the corrected one.
    assert running.client.post("events", good, key="bad-1").status == 200


def test_dstreams_run_serves_the_endpoint_only_when_enabled(
    kafka_bootstrap: str, make_topic: Callable[..., str], unique_name: str
) -> None:
    topic = make_topic(kafka_bootstrap, unique_name, partitions=PARTITIONS)
    app_id = unique_name.replace("_", "-")[:40]
    with ingest_alongside(settings_for(kafka_bootstrap, topic, app_id)) as absent:
        assert absent is None
    enabled = settings_for(kafka_bootstrap, topic, app_id, enabled=True)
    with ingest_alongside(enabled) as service:
        assert service is not None and service.server is not None
        client = IngestClient("127.0.0.1", service.server.port)
        reply = client.send_until_acknowledged("events", lines({"id": 1}), "k", deadline_s=60)
        client.close()
    assert reply.body == {"records": 1, "duplicate": False}
    assert service.writer is not None and not service.writer.ready  # stopped with the block


def start_on_a_small_topic(
    kafka_bootstrap: str, make_topic: Callable[..., str], unique_name: str
) -> tuple[str, Running]:
    """An endpoint writing to a topic that takes 2,000-byte batches: the endpoint's own limit
    (1 MB) lets larger records through, for Kafka to refuse."""
    topic = make_topic(
        kafka_bootstrap, unique_name, partitions=PARTITIONS, config={"max.message.bytes": "2000"}
    )
    settings = settings_for(kafka_bootstrap, topic, unique_name.replace("_", "-")[:40])
    return topic, start(settings, topic)


def test_a_record_too_large_for_the_topic_is_413_for_its_request_only(
    kafka_bootstrap: str, make_topic: Callable[..., str], unique_name: str
) -> None:
    topic, running = start_on_a_small_topic(kafka_bootstrap, make_topic, unique_name)
    try:
        port = running.client.port
        clients = [IngestClient("127.0.0.1", port) for _ in range(6)]
        bodies = [lines({"id": i}) for i in range(5)] + [lines({"pad": "x" * 5_000})]
        replies: list[Any] = [None] * len(bodies)

        def send(index: int) -> None:
            replies[index] = clients[index].post("events", bodies[index], key=f"k{index}")

        threads = [threading.Thread(target=send, args=(i,)) for i in range(len(bodies))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        statuses = [reply.status for reply in replies]
        assert statuses == [200] * 5 + [413], [(r.status, r.body) for r in replies]
        assert "larger than the topic accepts" in str(replies[-1].body["error"])
        ids = sorted(json.loads(m.value())["id"] for m in read_committed(kafka_bootstrap, topic, 5))
        assert ids == list(range(5))
        for client in clients:
            client.close()
    finally:
        running.stop()


def test_a_request_whose_refused_record_is_not_its_first_is_413_alone(
    kafka_bootstrap: str, make_topic: Callable[..., str], unique_name: str
) -> None:
    # Only a transaction's first record has a delivery report; keyed apart from it, the refused
    # records are in other partitions' batches. Whichever tells the writer (that report, or
    # the failed transaction's code), the request is 413 and nothing of it is written.
    topic, running = start_on_a_small_topic(kafka_bootstrap, make_topic, unique_name)
    try:
        big = [{"k": f"big-{i}", "pad": "x" * 5_000} for i in range(4)]
        body = lines({"k": "first", "id": 100}, *big, {"k": "last", "id": 101})
        refused = running.client.post("events", body, key="mixed", query="?key_field=k")
        assert refused.status == 413, refused.body
        assert "larger than the topic accepts" in str(refused.body["error"])
        written = running.client.send_until_acknowledged("events", lines({"id": 1}), "after")
        assert written.body == {"records": 1, "duplicate": False}
        ids = [json.loads(m.value()).get("id") for m in read_committed(kafka_bootstrap, topic, 1)]
        assert ids == [1]
        running.client.close()
    finally:
        running.stop()
