"""A job's input and output as the service sees them, for tests on the real path.

`produce` writes values to a topic; `read_output(config, name)` reads output `name` back from
the sink its config names, as the sink committed it: a files sink's committed batches
(`_SUCCESS` written), a Kafka topic through a `read_committed` consumer, a PostgreSQL table.

    settings = {...the job's config..., "kafka": {"bootstrap_servers": kafka_bootstrap}}
    produce(kafka_bootstrap, "lines", ["a b", "a"])
    rows = wait_for_rows(lambda: read_output(settings, "counts"), lambda r: len(r) == 2, 60)
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import psycopg

from service.config.settings import Settings
from service.config.sinks import FilesSinkSettings, KafkaSinkSettings, PostgresSinkSettings
from service.errors import ConfigError, SinkError

T = TypeVar("T")
# A test reads what a service committed moments ago: it is there well within this.
READ_TIMEOUT_S = 30.0


def produce(
    conf: str | Mapping[str, str],
    topic: str,
    values: Iterable[str | bytes],
    *,
    partition: int | None = None,
) -> int:
    """Writes `values` (str as UTF-8) to `topic`, in order, and waits until all are acknowledged;
    `conf` is the bootstrap servers or a librdkafka configuration. Returns how many it wrote."""
    from connectors.kafka_client import new_idempotent_producer

    producer = new_idempotent_producer(_client_conf(conf))
    extra = {} if partition is None else {"partition": partition}
    count = 0
    for value in values:
        producer.produce(topic, value.encode() if isinstance(value, str) else value, **extra)
        producer.poll(0)
        count += 1
    if producer.flush(READ_TIMEOUT_S) != 0:
        msg = f"could not deliver {count} values to {topic} within {READ_TIMEOUT_S:.0f} s"
        raise SinkError(msg)
    return count


def read_output(config: Settings | Mapping[str, Any], output: str) -> list[Any]:
    """Every row output `output` of the job configured by `config` (its settings, or its YAML
    as a dict) has committed, read from its sink:

    - files: the rows of every batch with `_SUCCESS`, in batch order, as JSON decodes them
      (a tuple the job wrote reads back as a list);
    - kafka: `(key, value)` of every committed record, partition by partition; keys as text
      (None where there was none), values decoded by the sink's format (json, utf-8, bytes);
    - postgres: the table's rows as tuples of the configured columns, sorted.
    """
    settings = config if isinstance(config, Settings) else Settings.model_validate(dict(config))
    sink = settings.sinks.get(output)
    if isinstance(sink, FilesSinkSettings):
        return [row for rows in read_file_batches(sink.path, output).values() for row in rows]
    if isinstance(sink, KafkaSinkSettings):
        records = read_topic(settings.kafka.librdkafka_config(), sink.topic)
        return [(_key(r.key()), _value(r.value(), sink.format)) for r in records]
    if isinstance(sink, PostgresSinkSettings):
        return read_table(sink.dsn.get_secret_value(), sink.table, sink.columns)
    kind = "not configured" if sink is None else f"a {sink.type} sink"
    msg = f"output {output!r} is {kind}; read_output reads files, kafka and postgres sinks"
    raise ConfigError(msg)


def read_file_batches(path: str | Path, output: str) -> dict[int, list[Any]]:
    """The rows of each committed batch of a files sink's `output`, by batch time, in order."""
    from sinks.files import FileSink

    sink = FileSink(path)
    return {t: sink.read_batch(output, t) for t in sink.committed_batches(output)}


def read_topic(conf: str | Mapping[str, str], topic: str) -> list[Any]:
    """Every record of `topic` a `read_committed` consumer sees up to the last stable offset of
    each partition, partition by partition, in offset order (confluent-kafka `Message`s)."""
    from connectors.kafka_client import CommittedTail, TopicRole, new_admin_client, partition_count

    client_conf = _client_conf(conf)
    partitions = partition_count(new_admin_client(client_conf), topic)
    if partitions == 0:
        msg = f"expected topic {topic!r} to exist, found no partitions: has the job written yet?"
        raise SinkError(msg)
    tail = CommittedTail(
        client_conf, f"dstreams-test-reader-{topic}", TopicRole("topic", SinkError)
    )
    try:
        bounds = {p: tail.end_offsets(topic, p, READ_TIMEOUT_S) for p in range(partitions)}
        found = tail.read(topic, bounds, READ_TIMEOUT_S)
    finally:
        tail.close()
    return [record for p in sorted(found) for record in found[p]]


def read_table(dsn: str, table: str, columns: Sequence[str]) -> list[tuple[Any, ...]]:
    """The rows of `table` as tuples of `columns`, sorted (a committed transaction's rows only)."""
    from psycopg import sql

    names = sql.SQL(", ").join(sql.Identifier(c) for c in columns)
    query = sql.SQL("SELECT {} FROM {} ORDER BY {}").format(names, sql.Identifier(table), names)
    with psycopg.connect(dsn, autocommit=True) as conn:
        return [tuple(row) for row in conn.execute(query).fetchall()]


def wait_for_rows(
    read: Callable[[], T], done: Callable[[T], bool], timeout_s: float, what: str = "the rows"
) -> T:
    """Calls `read` until `done` holds for what it returns, and returns that; fails after
    `timeout_s` with the last thing read. A read that raises (a topic not created yet) counts
    as not done."""
    deadline = time.monotonic() + timeout_s
    last: object = "nothing: every read failed"
    while time.monotonic() < deadline:
        try:
            found = read()
        except (SinkError, OSError, psycopg.Error) as error:
            last = error
        else:
            if done(found):
                return found
            last = found
        time.sleep(0.5)
    msg = f"timed out after {timeout_s:.0f} s waiting for {what}; last read: {last!r}"
    raise AssertionError(msg)


def _client_conf(conf: str | Mapping[str, str]) -> dict[str, str]:
    return {"bootstrap.servers": conf} if isinstance(conf, str) else dict(conf)


def _key(raw: bytes | None) -> str | None:
    return None if raw is None else raw.decode()


def _value(raw: bytes | None, sink_format: str) -> Any:
    if raw is None or sink_format == "bytes":
        return raw
    if sink_format == "json":
        return json.loads(raw)
    if sink_format == "utf-8":
        return raw.decode()
    msg = f"read_output decodes json, utf-8 and bytes values, not {sink_format}: use read_topic"
    raise ConfigError(msg)
