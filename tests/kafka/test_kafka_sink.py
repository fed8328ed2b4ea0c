"""The exactly-once Kafka sink and the dead-letter sink against a real broker.

The contract they keep is in docs/architecture.md, "Sinks".

What every sink does (idempotent and atomic writes, replays, commits, racing copies) is checked
on this one too by the sink contract suite, tests/contracts/test_sink_contract.py.
"""

from __future__ import annotations

import json
import pickle
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from service.dev.ports import free_port
from service.errors import ConfigError, SinkError
from sinks.base import BatchKey, Sink, WriteResult
from sinks.dead_letters import DeadLetter, DeadLetterSink
from sinks.kafka import KafkaSink, close_clients
from sinks.kafka_markers import Marker, marker_reader
from sinks.kafka_producers import close_producers

APP = "testapp"
# Short, so that a transaction a failed test leaves open cannot block later reads for long; well
# under the broker's transaction.max.timeout.ms (15 min by default).
TRANSACTION_TIMEOUT_MS = 10_000
_OFFSET = "dstreams.source.offset"
FENCING_CODES = {KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH}


@pytest.fixture(autouse=True)
def _fresh_clients() -> Iterator[None]:
    """Every test starts as a new Python worker would: no cached producers or readers."""
    close_clients()
    yield
    close_clients()


def _sink(bootstrap: str, name: str, **options: Any) -> KafkaSink:
    settings: dict[str, Any] = {
        "partitions": 2,
        "transaction_timeout_ms": TRANSACTION_TIMEOUT_MS,
        **options,
    }
    return KafkaSink({"bootstrap.servers": bootstrap}, f"{name}_out", **settings)


def _read_committed(bootstrap: str, topic: str) -> list[tuple[int, Any, Any, dict[str, bytes]]]:
    """Every (partition, key, value, headers) of `topic` a read_committed consumer sees."""
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
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
        return _consume_to_end(consumer, topic, set(partitions))
    finally:
        consumer.close()


def _consume_to_end(
    consumer: Any, topic: str, pending: set[int]
) -> list[tuple[int, Any, Any, dict[str, bytes]]]:
    records = []
    for _ in range(200):
        message = consumer.poll(1.0)
        if message is None:
            continue
        if message.error() is not None:
            if message.error().code() != KafkaError._PARTITION_EOF:
                raise KafkaException(message.error())
            pending.discard(message.partition())
            if not pending:
                return records
            continue
        headers = dict(message.headers() or [])
        records.append((message.partition(), message.key(), message.value(), headers))
    pytest.fail(f"did not reach the end of {topic}; still waiting for partitions {pending}")


def _key_values(records: list[tuple[int, Any, Any, dict[str, bytes]]]) -> list[tuple[Any, Any]]:
    return sorted(((key, value) for _, key, value, _ in records), key=repr)


def _markers(bootstrap: str, sink: KafkaSink, output: str) -> list[tuple[int, int]]:
    """(partition, batch_time) of every committed marker of `output`."""
    topic = sink.marker_topic_for(APP, output)
    records = _read_committed(bootstrap, topic)
    return sorted((p, Marker.from_json(json.loads(value)).batch_time) for p, _, value, _ in records)


def test_sink_satisfies_the_protocol_and_pickles_as_configuration(
    kafka_bootstrap: str, unique_name: str
) -> None:
    sink = _sink(kafka_bootstrap, unique_name)
    sink.setup(APP, unique_name)
    sink.write(BatchKey(APP, unique_name, 1000, 0), [("a", 1)])  # caches a producer and a reader

    copy = pickle.loads(pickle.dumps(sink))  # noqa: S301  # our own bytes, as Spark ships them

    assert isinstance(copy, Sink)
    assert vars(copy) == vars(sink)


def test_written_batch_is_read_back_committed(kafka_bootstrap: str, unique_name: str) -> None:
    sink = _sink(kafka_bootstrap, unique_name)
    sink.setup(APP, unique_name)

    result = sink.write(BatchKey(APP, unique_name, 1000, 1), [("the", 2), ("cat", 1), "plain"])

    assert result == WriteResult(3)
    records = _read_committed(kafka_bootstrap, sink.topic)
    assert _key_values(records) == [(None, b'"plain"'), (b"cat", b"1"), (b"the", b"2")]
    # A row without a key goes to output partition p % partitions, the same on every replay.
    assert [p for p, key, _, _ in records if key is None] == [1]
    assert _markers(kafka_bootstrap, sink, unique_name) == [(1, 1000)]


def test_the_cluster_is_reachable_while_it_answers_and_not_when_nothing_listens(
    kafka_bootstrap: str, unique_name: str
) -> None:
    sink = _sink(kafka_bootstrap, unique_name)
    sink.setup(APP, unique_name)
    assert sink.unreachable() is None

    port = free_port()  # nothing listens there
    gone = KafkaSink({"bootstrap.servers": f"127.0.0.1:{port}"}, f"{unique_name}_out")
    reason = gone.unreachable()
    assert reason is not None and reason.startswith("no broker answered")


def test_commit_names_the_partitions_without_a_marker(
    kafka_bootstrap: str, unique_name: str
) -> None:
    sink = _sink(kafka_bootstrap, unique_name)
    sink.setup(APP, unique_name)
    sink.write(BatchKey(APP, unique_name, 1000, 0), [("a", 1)])

    with pytest.raises(SinkError, match=r"missing for partitions 1 \(last marker None\)"):
        sink.commit(APP, unique_name, 1000, partitions=2)

    sink.write(BatchKey(APP, unique_name, 1000, 1), [])
    sink.commit(APP, unique_name, 1000, partitions=2)
    sink.commit(APP, unique_name, 1000, partitions=2)  # idempotent
    with pytest.raises(SinkError, match=r"missing for partitions 0 \(last marker 1000\)"):
        sink.commit(APP, unique_name, 2000, partitions=2)


def test_commit_reads_only_the_markers_this_process_did_not_commit(
    kafka_bootstrap: str, unique_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    sink = _sink(kafka_bootstrap, unique_name)
    sink.setup(APP, unique_name)
    sink.write(BatchKey(APP, unique_name, 1000, 1), [("b", 1)])
    close_producers()  # as if another process had written partition 1
    sink.write(BatchKey(APP, unique_name, 1000, 0), [("a", 1)])
    reader = marker_reader(sink.conf)
    read_back: list[list[int]] = []
    last_of = reader.last_of

    def spied(topic: str, expected: list[Marker]) -> dict[int, int | None]:
        read_back.append([marker.partition for marker in expected])
        return last_of(topic, expected)

    monkeypatch.setattr(reader, "last_of", spied)

    sink.commit(APP, unique_name, 1000, partitions=2)
    assert read_back == [[1]]  # partition 0's marker is the one this process committed

    read_back.clear()
    shown = r"0 \(last marker 1000\), 1 \(last marker 1000\)"
    with pytest.raises(SinkError, match=f"missing for partitions {shown}"):
        sink.commit(APP, unique_name, 2000, partitions=2)
    assert read_back == [[0, 1]]  # a known marker below the batch is checked in Kafka too


def test_close_releases_the_clients_and_a_later_commit_opens_new_ones(
    kafka_bootstrap: str, unique_name: str
) -> None:
    sink = _sink(kafka_bootstrap, unique_name, partitions=1)
    sink.setup(APP, unique_name)
    sink.write(BatchKey(APP, unique_name, 1000, 0), [("a", 1)])
    sink.commit(APP, unique_name, 1000, partitions=1)
    reader = marker_reader(sink.conf)

    sink.close()
    sink.close()

    assert marker_reader(sink.conf) is not reader
    sink.commit(APP, unique_name, 1000, partitions=1)  # a closed client would raise here


def test_an_older_batch_after_a_newer_marker_is_skipped(
    kafka_bootstrap: str, unique_name: str
) -> None:
    sink = _sink(kafka_bootstrap, unique_name)
    sink.setup(APP, unique_name)

    sink.write(BatchKey(APP, unique_name, 2000, 0), [("new", 1)])
    older = sink.write(BatchKey(APP, unique_name, 1000, 0), [("old", 1)])
    close_clients()  # the same, decided from the marker topic rather than the producer's memory
    older_elsewhere = sink.write(BatchKey(APP, unique_name, 1000, 0), [("old", 1)])

    assert older == older_elsewhere == WriteResult(0, skipped=True)
    assert _key_values(_read_committed(kafka_bootstrap, sink.topic)) == [(b"new", b"1")]
    assert _markers(kafka_bootstrap, sink, unique_name) == [(0, 2000)]


def test_a_changing_number_of_tasks_grows_the_marker_topic_and_replays_skip(
    kafka_bootstrap: str, unique_name: str
) -> None:
    """A map-only job over a topic that grows: 5 tasks, then 2, then 5 again, then a replay."""
    sink = _sink(kafka_bootstrap, unique_name)  # 2 marker partitions at setup
    sink.setup(APP, unique_name)
    marker_topic = sink.marker_topic_for(APP, unique_name)
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})

    def run_batch(batch_time: int, tasks: int) -> list[WriteResult]:
        sink.prepare_tasks(APP, unique_name, tasks)
        results = [
            sink.write(BatchKey(APP, unique_name, batch_time, p), [(f"{batch_time}-{p}", p)])
            for p in range(tasks)
        ]
        sink.commit(APP, unique_name, batch_time, tasks)
        return results

    run_batch(1000, 5)
    assert len(admin.list_topics(marker_topic, timeout=10).topics[marker_topic].partitions) == 5
    run_batch(2000, 2)
    run_batch(3000, 5)
    close_clients()  # a restarted driver: the replay decides from the marker topic alone
    replayed = run_batch(3000, 5)

    assert replayed == [WriteResult(0, skipped=True)] * 5
    batches = [(1000, 5), (2000, 2), (3000, 5)]
    expected = [(f"{t}-{p}".encode(), b"%d" % p) for t, tasks in batches for p in range(tasks)]
    assert _key_values(_read_committed(kafka_bootstrap, sink.topic)) == sorted(expected, key=repr)
    last = dict(_markers(kafka_bootstrap, sink, unique_name))  # sorted: each partition's last
    assert last == dict.fromkeys(range(5), 3000)


def test_a_task_waits_for_a_marker_partition_the_driver_is_adding(
    kafka_bootstrap: str, unique_name: str
) -> None:
    """A broker may learn of new partitions a moment after the controller: a task looks again."""
    sink = _sink(kafka_bootstrap, unique_name)
    sink.setup(APP, unique_name)
    grower = threading.Timer(1.0, sink.prepare_tasks, (APP, unique_name, 4))
    grower.start()
    try:
        written = sink.write(BatchKey(APP, unique_name, 1000, 3), [("late", 1)])
    finally:
        grower.join()

    assert written == WriteResult(1)
    assert _markers(kafka_bootstrap, sink, unique_name) == [(3, 1000)]


def test_a_zombie_with_the_same_transactional_id_is_fenced(
    kafka_bootstrap: str, unique_name: str
) -> None:
    sink = _sink(kafka_bootstrap, unique_name)
    sink.setup(APP, unique_name)
    sink.write(BatchKey(APP, unique_name, 1000, 0), [("a", 1)])  # this process caches a producer
    key = BatchKey(APP, unique_name, 2000, 0)
    # The zombie fences the cached producer, then opens a transaction with rows and a marker.
    zombie = Producer(sink.producer_settings(key))
    zombie.init_transactions(30)
    zombie.begin_transaction()
    zombie.produce(sink.topic, key=b"zombie", value=b"1", partition=0)
    marker = Marker(APP, unique_name, 0, 2000)
    zombie.produce(
        sink.marker_topic_for(APP, unique_name),
        key=marker.record_key,
        value=marker.encode(),
        partition=0,
    )
    zombie.flush(10)

    result = sink.write(key, [("b", 2)])  # fenced once, re-creates its producer, fences the zombie
    with pytest.raises(KafkaException) as raised:
        zombie.commit_transaction(10)

    assert result == WriteResult(1)
    assert raised.value.args[0].code() in FENCING_CODES
    assert _key_values(_read_committed(kafka_bootstrap, sink.topic)) == [(b"a", b"1"), (b"b", b"2")]
    assert _markers(kafka_bootstrap, sink, unique_name) == [(0, 1000), (0, 2000)]


def test_a_copy_that_committed_first_makes_the_cached_producer_skip(
    kafka_bootstrap: str, unique_name: str
) -> None:
    sink = _sink(kafka_bootstrap, unique_name)
    sink.setup(APP, unique_name)
    sink.write(BatchKey(APP, unique_name, 1000, 0), [("a", 1)])  # remembers marker 1000
    key = BatchKey(APP, unique_name, 2000, 0)
    # A speculative copy of the task, in another process, commits batch 2000 first.
    copy = Producer(sink.producer_settings(key))
    copy.init_transactions(30)
    copy.begin_transaction()
    copy.produce(sink.topic, key=b"b", value=b"2", partition=0)
    marker = Marker(APP, unique_name, 0, 2000)
    topic = sink.marker_topic_for(APP, unique_name)
    copy.produce(topic, key=marker.record_key, value=marker.encode(), partition=0)
    copy.commit_transaction(10)

    result = sink.write(key, [("b", 2)])  # fenced, re-creates its producer, reads marker 2000

    assert result == WriteResult(0, skipped=True)
    assert _key_values(_read_committed(kafka_bootstrap, sink.topic)) == [(b"a", b"1"), (b"b", b"2")]


def test_a_failed_transaction_is_aborted_and_leaves_nothing_visible(
    kafka_bootstrap: str, unique_name: str, make_topic: Callable[..., str], caplog: Any
) -> None:
    sink = _sink(kafka_bootstrap, unique_name)
    # The broker refuses records over 1 kB in this topic: every attempt fails and is aborted.
    make_topic(kafka_bootstrap, sink.topic, partitions=2, config={"max.message.bytes": "1024"})
    sink.setup(APP, unique_name)

    with pytest.raises(SinkError, match="no transaction committed in 5 attempts"):
        sink.write(BatchKey(APP, unique_name, 1000, 0), [("small", 1), ("big", "x" * 4096)])
    # The same producer, still cached after its aborts, then commits the task's fixed rows.
    written = sink.write(BatchKey(APP, unique_name, 1000, 0), [("small", 1)])

    assert "abortable error" in caplog.text
    assert "re-creating the producer" not in caplog.text
    assert written == WriteResult(1)
    assert _key_values(_read_committed(kafka_bootstrap, sink.topic)) == [(b"small", b"1")]
    assert _markers(kafka_bootstrap, sink, unique_name) == [(0, 1000)]


_CRASH_MID_TRANSACTION = """
import json, os, sys
from confluent_kafka import Producer
settings, topic, marker_topic, marker = json.loads(sys.argv[1])
producer = Producer(settings)
producer.init_transactions(30)
producer.begin_transaction()
producer.produce(topic, key=b"half", value=b"1", partition=0)
producer.produce(marker_topic, key=marker[0].encode(), value=marker[1].encode(), partition=0)
producer.flush(10)
os._exit(0)  # dies inside the transaction: no commit, no abort, no clean close
"""


def test_a_crash_mid_transaction_leaves_nothing_and_the_next_write_succeeds(
    kafka_bootstrap: str, unique_name: str
) -> None:
    sink = _sink(kafka_bootstrap, unique_name)
    sink.setup(APP, unique_name)
    key = BatchKey(APP, unique_name, 1000, 0)
    marker = Marker(APP, unique_name, 0, 1000)
    argument = json.dumps(
        [
            sink.producer_settings(key),
            sink.topic,
            sink.marker_topic_for(APP, unique_name),
            [marker.record_key.decode(), marker.encode().decode()],
        ]
    )
    subprocess.run([sys.executable, "-c", _CRASH_MID_TRANSACTION, argument], check=True, timeout=60)

    result = sink.write(key, [("whole", 1)])

    assert result == WriteResult(1)
    assert _key_values(_read_committed(kafka_bootstrap, sink.topic)) == [(b"whole", b"1")]
    assert sink.write(key, [("whole", 1)]) == WriteResult(0, skipped=True)


def test_a_transaction_timeout_above_the_broker_maximum_fails_at_setup(
    kafka_bootstrap: str, unique_name: str
) -> None:
    sink = _sink(kafka_bootstrap, unique_name, transaction_timeout_ms=10**9)

    with pytest.raises(ConfigError, match=r"exceeds the brokers' transaction\.max\.timeout\.ms="):
        sink.setup(APP, unique_name)

    topics = AdminClient({"bootstrap.servers": kafka_bootstrap}).list_topics(timeout=10).topics
    assert sink.topic not in topics  # it failed before creating anything


def test_settings_the_sink_owns_are_refused(kafka_bootstrap: str, unique_name: str) -> None:
    with pytest.raises(ConfigError, match="acks is set by the sink itself"):
        KafkaSink({"bootstrap.servers": kafka_bootstrap, "acks": "1"}, f"{unique_name}_out")


def test_dead_letters_carry_their_headers_and_are_not_duplicated_on_replay(
    kafka_bootstrap: str, unique_name: str
) -> None:
    sink = DeadLetterSink(
        {"bootstrap.servers": kafka_bootstrap},
        f"{unique_name}_dlq",
        transaction_timeout_ms=TRANSACTION_TIMEOUT_MS,
    )
    output = f"{unique_name}.dead-letters"
    sink.setup(APP, output)
    letters = [
        DeadLetter.from_error("clicks", 3, 42, ValueError("bad json"), b"k1", b"{oops"),
        DeadLetter.from_error("clicks", 3, 57, KeyError("user"), None, b"\xff"),
    ]
    key = BatchKey(APP, output, 5000, 0)

    written = sink.write(key, letters)
    close_clients()
    replayed = sink.write(key, letters)

    assert (written, replayed) == (WriteResult(2), WriteResult(0, skipped=True))
    records = sorted(_read_committed(kafka_bootstrap, sink.topic), key=lambda r: r[3][_OFFSET])
    assert [(key, value) for _, key, value, _ in records] == [(b"k1", b"{oops"), (None, b"\xff")]
    assert records[0][3] == {
        "dstreams.source.topic": b"clicks",
        "dstreams.source.partition": b"3",
        "dstreams.source.offset": b"42",
        "dstreams.error.type": b"ValueError",
        "dstreams.error.message": b"bad json",
        "dstreams.batch.time": b"5000",
    }
    assert records[1][3]["dstreams.error.type"] == b"KeyError"
    assert records[1][3]["dstreams.error.message"] == b"'user'"
