"""The Kafka sink's commit markers: what they are, where they live, how the last one is read.

Markers. Each (app, output) has its own marker topic (default ``dstreams.markers.<app>.<output>``).
Task ``p`` of the output writes its marker to marker-topic partition ``p``, and nothing but that
task's transactional producer (``transactional.id = dstreams.<app>.<output>.<p>``) writes there. A
marker record has the constant key ``<app>/<output>/<p>`` and a JSON value naming the batch time
and the number of records the transaction wrote to the output topic (``rows``, absent in markers
of older builds), which `dstreams audit` holds against the committed data.

Why a partition per task: after ``init_transactions()`` no transaction is open on the partition, so
its last stable offset is the end of the log and every committed marker lies below it. The last
committed marker is found by reading a short tail with a ``read_committed`` consumer: no waiting for
other writers' transactions, no scan of the whole log. On a partition shared by several writers a
committed marker could hide behind another writer's open transaction and a replay would duplicate.
The topic is compacted: one key per partition keeps it at one marker per task plus the open segment.

How many partitions. An output's number of tasks is a function of each batch's plan (a map-only
job has a task per input range, so partitions added to an input add tasks), not a setting. The
driver grows the marker topic to a partition per task before each write job
(`KafkaSink.prepare_tasks`); a replay has the journaled plan, hence the same tasks. Growing never
moves a marker (task p keeps partition p and its transactional.id), and a partition no task has
written yet holds no marker, which reads as "nothing committed", as it is. A batch with fewer
tasks leaves the higher partitions alone: their markers name older batches, and a later batch
with that many tasks again writes past them. Batches of an output are written in batch order,
so a marker ``>= t`` of partition p means that p of batch t is committed.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass
from typing import Any

from confluent_kafka import KafkaException

from connectors.kafka_client import CommittedTail, TopicRole
from connectors.process_cache import ConfKey, ProcessCache, conf_key
from service.errors import SinkError
from sinks.kafka_producers import client_settings

MARKER_TOPIC_CONFIG = {"cleanup.policy": "compact"}
MARKER_FORMAT_VERSION = 1

# Each transaction adds two offsets to a marker partition (the marker and its commit or abort
# control record): the first window covers eight transactions, and doubles until it finds one.
_FIRST_WINDOW = 16
# A marker read (one ListOffsets, one or two fetches) takes ~25 ms here; the limit must stay under
# Spark's patience for a task. A broker slower than this is unavailable, and the task is retried.
READ_TIMEOUT_S = 30.0
MARKER_TOPIC = TopicRole("marker topic", SinkError)


def default_marker_topic(app: str, output: str) -> str:
    return f"dstreams.markers.{app}.{output}"


@dataclass(frozen=True)
class Marker:
    """Records that `batch_time` of (app, output, partition) is committed to the output topic."""

    app: str
    output: str
    partition: int
    batch_time: int
    rows: int | None = None
    """Records written with it to the output topic; None when reading, or from older builds."""

    @property
    def record_key(self) -> bytes:
        return f"{self.app}/{self.output}/{self.partition}".encode()

    def to_json(self) -> dict[str, Any]:
        fields = ("app", "output", "partition", "batch_time")
        data = {"v": MARKER_FORMAT_VERSION, **{name: getattr(self, name) for name in fields}}
        if self.rows is not None:
            data["rows"] = self.rows
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Marker:
        rows = data.get("rows")
        return cls(
            str(data["app"]),
            str(data["output"]),
            int(data["partition"]),
            int(data["batch_time"]),
            None if rows is None else int(rows),
        )

    def encode(self) -> bytes:
        return json.dumps(self.to_json(), separators=(",", ":"), sort_keys=True).encode()


class MarkerReader:
    """Reads last committed markers; assigned partitions only, never joins a group or commits."""

    def __init__(self, conf: dict[str, Any]) -> None:
        self.tail = CommittedTail(client_settings(conf), "dstreams-marker-reader", MARKER_TOPIC)
        self._lock = threading.Lock()

    def last(self, topic: str, expected: Marker) -> int | None:
        """The batch time of the last committed marker with `expected`'s key, or None."""
        return self.last_of(topic, [expected])[expected.partition]

    def last_of(self, topic: str, expected: list[Marker]) -> dict[int, int | None]:
        """`last` for several partitions of `topic` at once, by partition: one pass, not many."""
        wanted = {m.partition: m for m in expected}
        with self._lock:
            ends = {p: self._end_offsets(topic, p) for p in wanted}
            tails = self.tail.read_back(
                topic,
                ends,
                window=_FIRST_WINDOW,
                growth=2,
                decode=lambda record: record,
                enough=bool,  # the newest window holding any committed record holds the last
                timeout_s=READ_TIMEOUT_S,
            )
        return {
            p: _checked(records[-1], wanted[p]).batch_time if records else None
            for p, records in tails.items()
        }

    def wait_until_visible(self, topic: str, partition: int, offset: int) -> None:
        """Block until `read_committed` readers see the record at `offset`.

        ``commit_transaction()`` returns once the coordinator has logged the decision; the commit
        control records reach the partitions a few milliseconds later. A marker read in that gap
        would miss a committed marker, so a write returns only once its marker is visible. (A
        new producer needs no such wait: ``init_transactions()`` returns after the gap closes.)
        """
        deadline = time.monotonic() + READ_TIMEOUT_S
        with self._lock:
            while self._end_offsets(topic, partition)[1] <= offset:
                if time.monotonic() > deadline:
                    msg = (
                        f"{_name(topic, partition)}: the committed marker at offset {offset} is "
                        f"still not visible after {READ_TIMEOUT_S:.0f} s; retry the task (it will "
                        "skip)"
                    )
                    raise SinkError(msg)
                time.sleep(0.002)

    def close(self) -> None:
        self.tail.close()

    def _end_offsets(self, topic: str, partition: int) -> tuple[int, int]:
        """`(low, last stable offset)`; failovers are waited out until `READ_TIMEOUT_S`."""
        try:
            return self.tail.end_offsets(topic, partition, READ_TIMEOUT_S)
        except KafkaException as exc:
            where = _name(topic, partition)
            msg = f"could not find the end of {where}: {exc.args[0]}; retry the task"
            raise SinkError(msg) from exc


def _name(topic: str, partition: int) -> str:
    return f"marker partition {topic}[{partition}]"


def _checked(record: Any, expected: Marker) -> Marker:
    """Decode a marker record and insist that it belongs to the partition's one writer."""
    key, value = record.key(), record.value()
    if key != expected.record_key or value is None:
        msg = (
            f"marker topic {record.topic()} partition {expected.partition} holds a record with key "
            f"{key!r}, expected only {expected.record_key!r}; a marker topic belongs to one "
            "(app, output): give each output its own marker_topic"
        )
        raise SinkError(msg)
    return Marker.from_json(json.loads(value))


# This process's marker readers, one per client configuration, kept across tasks and batches.
_READERS: ProcessCache[ConfKey, MarkerReader] = ProcessCache(close=MarkerReader.close)


def marker_reader(conf: dict[str, str]) -> MarkerReader:
    """This process's marker reader for a client configuration."""
    return _READERS.get(conf_key(conf), lambda: MarkerReader(conf))


def close_marker_readers() -> None:
    """Close every cached marker reader of this process (worker shutdown, tests)."""
    _READERS.close_all()
