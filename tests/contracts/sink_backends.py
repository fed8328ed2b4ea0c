"""One adapter per sink backend for the sink contract suite (`test_sink_contract.py`).

An adapter says how to build its sink for one test and how to read back what the sink has
committed, in the contract's own terms: rows as `(word, count)` pairs and markers as
`(batch_time, partition)` pairs, both sorted and with duplicates kept, so that a key committed
twice shows up twice. Everything else (what to write, what to expect) is the contract's.

To give a new sink the suite: write an adapter class here and add one `pytest.param` line for it
to `SINK_BACKENDS`, with the tier mark of what it needs (unit: nothing; kafka: a broker; ...).
Besides the `SinkBackend` methods, the class has ``start(request, name, folder)``, which returns
the adapter for one test: `name` is unique to the test, `folder` is its temporary directory, and
servers come from the session fixtures through ``request.getfixturevalue``.
"""

from __future__ import annotations

import json
import pickle
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar, Protocol

import psycopg
import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from psycopg import sql

from sinks.base import BatchKey, Sink
from sinks.dead_letters import DeadLetter, DeadLetterSink
from sinks.files import FileSink
from sinks.kafka import KafkaSink, close_clients
from sinks.kafka_markers import Marker
from sinks.memory import MemorySink
from sinks.postgres import PostgresSink

APP = "contract"
Pair = tuple[str, int]
Slot = tuple[int, int]  # (batch_time, partition): one marker
# Short, so that a transaction a failed test leaves open cannot block later reads for long.
KAFKA_TRANSACTION_TIMEOUT_MS = 10_000


class SinkBackend(Protocol):
    """What the contract needs from one backend."""

    # The sink keeps what it committed in the writing process (a driver-side sink): a crash of
    # that process takes everything with it, and concurrent copies of a task are threads.
    in_process: ClassVar[bool]

    def build(self, output: str) -> Sink:
        """A new sink for (APP, output), `setup` already called, as the driver prepares it."""
        ...

    def rows(self, pairs: Sequence[Pair]) -> list[Any]:
        """The contract's `(word, count)` rows in the form this sink writes."""
        ...

    def committed_rows(self, sink: Sink, output: str) -> list[Pair]:
        """Every committed row of `output`, as sorted `(word, count)` pairs."""
        ...

    def committed_markers(self, sink: Sink, output: str) -> list[Slot]:
        """Every committed marker of `output` as sorted `(batch_time, partition)`."""
        ...

    def as_new_worker(self, sink: Sink) -> Sink:
        """`sink` as a fresh executor process would get it: unpickled, no cached clients."""
        ...

    def stop(self) -> None:
        """Release what the test's sinks cached in this process (connections, producers)."""
        ...


class _Defaults:
    """What most backends share: sinks shipped to executors as pickles, rows as they are."""

    in_process = False

    def rows(self, pairs: Sequence[Pair]) -> list[Any]:
        return list(pairs)

    def as_new_worker(self, sink: Sink) -> Sink:
        shipped: Sink = pickle.loads(pickle.dumps(sink))  # noqa: S301 - as Spark ships a sink
        return shipped

    def stop(self) -> None:
        """Nothing is cached beyond what the end of the process releases."""


class MemoryBackend(_Defaults):
    """The in-memory test sink; driver-side, so it is never shipped to a worker."""

    in_process = True

    @classmethod
    def start(cls, request: pytest.FixtureRequest, name: str, folder: Path) -> MemoryBackend:
        return cls()

    def build(self, output: str) -> Sink:
        sink = MemorySink()
        sink.setup(APP, output)
        return sink

    def committed_rows(self, sink: Sink, output: str) -> list[Pair]:
        assert isinstance(sink, MemorySink)
        parts = sink.parts.items()
        return sorted(row for key, rows in parts if key.output == output for row in rows)

    def committed_markers(self, sink: Sink, output: str) -> list[Slot]:
        assert isinstance(sink, MemorySink)
        return sorted((k.batch_time, k.partition) for k in sink.parts if k.output == output)

    def as_new_worker(self, sink: Sink) -> Sink:
        return sink  # driver-side: a replay reaches the very object that holds the commits


class FilesBackend(_Defaults):
    """The files sink in the test's own folder; a part file is its key's marker."""

    def __init__(self, root: Path) -> None:
        self.root = root

    @classmethod
    def start(cls, request: pytest.FixtureRequest, name: str, folder: Path) -> FilesBackend:
        return cls(folder / "files-sink")

    def build(self, output: str) -> Sink:
        sink = FileSink(self.root)
        sink.setup(APP, output)
        return sink

    def committed_rows(self, sink: Sink, output: str) -> list[Pair]:
        lines = (line for part in self._parts(output) for line in part.read_text().splitlines())
        return sorted((word, count) for word, count in map(json.loads, lines))

    def committed_markers(self, sink: Sink, output: str) -> list[Slot]:
        return sorted(
            (int(part.parent.name.removeprefix("t=")), int(part.stem.removeprefix("part-")))
            for part in self._parts(output)
        )

    def _parts(self, output: str) -> list[Path]:
        return sorted((self.root / output).glob("t=*/part-*.jsonl"))


class PostgresBackend(_Defaults):
    """The PostgreSQL sink on the session's server, with a table and marker table per test."""

    def __init__(self, dsn: str, name: str) -> None:
        self.dsn = dsn
        self.name = name

    @classmethod
    def start(cls, request: pytest.FixtureRequest, name: str, folder: Path) -> PostgresBackend:
        return cls(request.getfixturevalue("postgres_dsn"), name)

    def build(self, output: str) -> Sink:
        sink = PostgresSink(
            self.dsn,
            f"{self.name}_{output}",
            columns=["word", "count"],
            column_types={"word": "text", "count": "bigint"},
            markers_table=f"{self.name}_markers",
        )
        sink.setup(APP, output)
        return sink

    def committed_rows(self, sink: Sink, output: str) -> list[Pair]:
        assert isinstance(sink, PostgresSink)
        query = sql.SQL("SELECT word, count FROM {}").format(sql.Identifier(sink.table))
        return sorted((str(w), int(c)) for w, c in self._select(query, ()))

    def committed_markers(self, sink: Sink, output: str) -> list[Slot]:
        assert isinstance(sink, PostgresSink)
        query = sql.SQL("SELECT batch_time, {} FROM {} WHERE app = %s AND output = %s").format(
            sql.Identifier("partition"), sql.Identifier(sink.markers_table)
        )
        return sorted((int(t), int(p)) for t, p in self._select(query, (APP, output)))

    def _select(self, query: sql.Composed, params: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        with psycopg.connect(self.dsn) as conn:
            return conn.execute(query, params).fetchall()


class KafkaBackend(_Defaults):
    """The Kafka sink on the session's broker; rows and markers are read `read_committed`."""

    def __init__(self, bootstrap: str, name: str) -> None:
        self.conf = {"bootstrap.servers": bootstrap}
        self.name = name
        close_clients()  # start as a new worker would: no cached producers or readers

    @classmethod
    def start(cls, request: pytest.FixtureRequest, name: str, folder: Path) -> KafkaBackend:
        return cls(request.getfixturevalue("kafka_bootstrap"), name)

    def build(self, output: str) -> Sink:
        sink = KafkaSink(self.conf, f"{self.name}_{output}", **self.options(output))
        sink.setup(APP, output)
        return sink

    def options(self, output: str) -> dict[str, Any]:
        """Two partitions, and a marker topic of this test's own (the default name is derived
        from app and output, which every test shares)."""
        return {
            "partitions": 2,
            "marker_topic": f"{self.name}_{output}_markers",
            "transaction_timeout_ms": KAFKA_TRANSACTION_TIMEOUT_MS,
        }

    def committed_rows(self, sink: Sink, output: str) -> list[Pair]:
        assert isinstance(sink, KafkaSink)
        records = read_committed(self.conf, sink.topic)
        return sorted((key.decode(), json.loads(value)) for key, value, _ in records)

    def committed_markers(self, sink: Sink, output: str) -> list[Slot]:
        assert isinstance(sink, KafkaSink)
        records = read_committed(self.conf, sink.marker_topic_for(APP, output))
        markers = (Marker.from_json(json.loads(value)) for _, value, _ in records)
        return sorted((m.batch_time, m.partition) for m in markers)

    def as_new_worker(self, sink: Sink) -> Sink:
        close_clients()  # this process's cached producers and marker readers, as in a new worker
        return super().as_new_worker(sink)

    def stop(self) -> None:
        close_clients()


class DeadLetterBackend(KafkaBackend):
    """The dead-letter sink: a Kafka sink whose rows are `DeadLetter`s. The pair `(word, n)` is
    the dead letter of source offset `n` whose key is the word."""

    def build(self, output: str) -> Sink:
        sink = DeadLetterSink(self.conf, f"{self.name}_{output}", **self.options(output))
        sink.setup(APP, output)
        return sink

    def rows(self, pairs: Sequence[Pair]) -> list[Any]:
        return [
            DeadLetter.from_error("source", 0, n, ValueError(f"bad {word}"), word.encode(), b"?")
            for word, n in pairs
        ]

    def committed_rows(self, sink: Sink, output: str) -> list[Pair]:
        assert isinstance(sink, KafkaSink)
        records = read_committed(self.conf, sink.topic)
        offset = "dstreams.source.offset"
        return sorted((key.decode(), int(headers[offset])) for key, _, headers in records)


SINK_BACKENDS = [
    pytest.param(MemoryBackend, id="memory", marks=pytest.mark.unit),
    pytest.param(FilesBackend, id="files", marks=pytest.mark.unit),
    pytest.param(PostgresBackend, id="postgres", marks=pytest.mark.postgres),
    pytest.param(KafkaBackend, id="kafka", marks=pytest.mark.kafka),
    pytest.param(DeadLetterBackend, id="dead-letters", marks=pytest.mark.kafka),
]


def read_committed(conf: dict[str, str], topic: str) -> list[tuple[Any, Any, dict[str, bytes]]]:
    """Every `(key, value, headers)` of every partition of `topic` a `read_committed` consumer
    sees, read to the end (the last stable offset)."""
    consumer = Consumer(
        {
            **conf,
            "group.id": f"{topic}_contract_reader",
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
) -> list[tuple[Any, Any, dict[str, bytes]]]:
    records = []
    for _ in range(200):
        message = consumer.poll(1.0)
        if message is None:
            continue
        error = message.error()
        if error is None:
            records.append((message.key(), message.value(), dict(message.headers() or [])))
        elif error.code() == KafkaError._PARTITION_EOF:
            pending.discard(message.partition())
            if not pending:
                return records
        else:
            raise KafkaException(error)
    pytest.fail(f"did not reach the end of {topic}; still waiting for partitions {pending}")


def key_of(output: str, batch_time: int, partition: int) -> BatchKey:
    return BatchKey(APP, output, batch_time, partition)
