"""What the job-shape tests share: input written with its positions, the service's config, the
journal's batches, and every sink's output read back as a multiset of `(key, value)` rows.

Kafka outputs are read `read_committed` to each partition's end; PostgreSQL tables whole; the
files sink's committed batches (`_SUCCESS`). Expected outputs of shapes that depend on how input
is cut into batches (a count, a join) are derived from the journaled plans, batch by batch.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import psycopg
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition
from psycopg import sql

from service.journal.base import JournalState
from service.journal.file import FileJournal
from sinks.files import FileSink

Rows = Counter[tuple[str, str]]
Position = tuple[str, int, int]
"""(topic, partition, offset) of an input record."""


def produce(bootstrap: str, topic: str, lines: list[str], partitions: range) -> dict[Position, str]:
    """Writes `lines` round-robin over `partitions`; returns each line by its position."""
    where: dict[Position, str] = {}
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for index, line in enumerate(lines):

        def delivered(error: Any, message: Any, line: str = line) -> None:
            assert error is None, error
            where[(message.topic(), message.partition(), message.offset())] = line

        partition = partitions[index % len(partitions)]
        producer.produce(topic, line.encode(), partition=partition, on_delivery=delivered)
        producer.poll(0)
    assert producer.flush(60) == 0
    assert len(where) == len(lines)
    return where


def sink_config(app: str, output: str, dsn: str, files: Path) -> dict[str, Any]:
    """The sink of `output`, chosen by the suffix of its name: _kafka, _pg or _files."""
    kind = output.rsplit("_", 1)[1]
    if kind == "kafka":
        return {"type": "kafka", "topic": kafka_topic(app, output), "format": "utf-8"}
    if kind == "pg":
        return {
            "type": "postgres",
            "dsn": dsn,
            "table": table(app, output),
            "columns": ["k", "v"],
            "column_types": {"k": "text", "v": "text"},
        }
    return {"type": "files", "path": str(files)}


def service_config(
    app: str, job: str, bootstrap: str, sources: dict[str, Any], sinks: dict[str, Any], tmp: Path
) -> dict[str, Any]:
    return {
        "app_id": app,
        "job": job,
        "batch_interval_ms": 1000,
        "default_partitions": 3,
        # Up to 4 attempts per task, as in production configs (plain local[2] fails at once).
        "spark": {"master": "local[2,4]"},
        "kafka": {"bootstrap_servers": bootstrap, "require_replication": False},
        "sources": sources,
        "sinks": sinks,
        "journal": {"type": "file", "path": str(journal_path(tmp))},
    }


def source_config(rate: int, **subscription: Any) -> dict[str, Any]:
    """A source of UTF-8 lines from the earliest offsets, `rate` records/s per partition."""
    return {
        **subscription,
        "starting_offsets": "earliest",
        "codec": "utf-8",
        "max_rate_per_partition": rate,
    }


def kafka_topic(app: str, output: str) -> str:
    return f"{app}.{output}"


def table(app: str, output: str) -> str:
    return f"{app}_{output}"


def journal_path(tmp: Path) -> Path:
    return tmp / "journal"


def journal_state(tmp: Path) -> JournalState:
    path = journal_path(tmp)
    return JournalState.from_records(FileJournal(path).read() if path.exists() else [])


def drained(tmp: Path, written: dict[Position, str]) -> bool:
    """Whether the journal has planned and completed every written record."""
    ends: dict[tuple[str, int], int] = {}
    for topic, partition, offset in written:
        ends[(topic, partition)] = max(ends.get((topic, partition), 0), offset + 1)
    state = journal_state(tmp)
    positions = state.last_positions()
    caught_up = all(positions.get(tp, 0) >= end for tp, end in ends.items())
    return caught_up and not state.pending()


def batches(tmp: Path, written: dict[Position, str]) -> list[dict[str, list[str]]]:
    """Each completed batch's input lines, by topic, from its journaled plan."""
    state = journal_state(tmp)
    assert not state.pending(), f"batches still pending: {state.pending()}"
    found = []
    for t in sorted(state.completed):
        lines: dict[str, list[str]] = {}
        for r in state.planned[t].ranges:
            for offset in range(r.from_offset, r.until_offset):
                lines.setdefault(r.topic, []).append(written[(r.topic, r.partition, offset)])
        found.append(lines)
    return found


def per_batch(
    batches: list[dict[str, list[str]]], rows_of: Callable[[dict[str, list[str]]], Iterable[Any]]
) -> Rows:
    """The rows `rows_of` makes of each batch's lines, over all batches."""
    return Counter(row for lines in batches for row in rows_of(lines))


def read_kafka(bootstrap: str, topics: list[str]) -> dict[str, Rows]:
    """Every committed `(key, value)` of each topic, read to the end of every partition."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"shape-verifier-{time.monotonic_ns()}",
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
            "enable.auto.commit": False,
        }
    )
    found: dict[str, Rows] = {topic: Counter() for topic in topics}
    try:
        metadata = consumer.list_topics(timeout=30).topics
        pending = {(t, p) for t in topics for p in metadata[t].partitions}
        consumer.assign([TopicPartition(t, p, OFFSET_BEGINNING) for t, p in pending])
        deadline = time.monotonic() + 120
        while pending:
            assert time.monotonic() < deadline, f"did not reach the end of {sorted(pending)[:5]}"
            message = consumer.poll(1.0)
            if message is None:
                continue
            error = message.error()
            if error is None:
                row = (message.key().decode(), message.value().decode())
                found[message.topic()][row] += 1
            elif error.code() == KafkaError._PARTITION_EOF:  # noqa: SLF001 - public error code
                pending.discard((message.topic(), message.partition()))
        return found
    finally:
        consumer.close()


def read_table(dsn: str, name: str) -> Rows:
    with psycopg.connect(dsn, autocommit=True) as conn:
        query = sql.SQL("SELECT k, v FROM {}").format(sql.Identifier(name))
        return Counter((str(k), str(v)) for k, v in conn.execute(query).fetchall())


def read_files(root: Path, output: str) -> Rows:
    sink = FileSink(root)
    return Counter(
        (str(k), str(v))
        for t in sink.committed_batches(output)
        for k, v in sink.read_batch(output, t)
    )
