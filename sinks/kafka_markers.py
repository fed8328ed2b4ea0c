"""The Kafka sink's plumbing: commit markers, the per-process client cache, topic administration.

Markers. Each (app, output) has its own marker topic (default ``dstreams.markers.<app>.<output>``).
Task ``p`` of the output writes its marker to marker-topic partition ``p``, and nothing but that
task's transactional producer (``transactional.id = dstreams-<app>-<output>-<p>``) writes there. A
marker record has the constant key ``<app>/<output>/<p>`` and a JSON value naming the batch time.

Why a partition per task: after ``init_transactions()`` no transaction is open on the partition, so
its last stable offset is the end of the log and every committed marker lies below it. The last
committed marker is found by reading a short tail with a ``read_committed`` consumer: no waiting for
other writers' transactions, no scan of the whole log. On a partition shared by several writers a
committed marker could hide behind another writer's open transaction and a replay would duplicate.
The topic is compacted: one key per partition keeps it at one marker per task plus the open segment.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import tempfile
import threading
import time
import uuid
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import ConfigResource, NewPartitions, NewTopic, ResourceType

from connectors.watermarks import end_offsets
from service.errors import ConfigError, SinkError

MARKER_TOPIC_CONFIG = {"cleanup.policy": "compact"}
MARKER_FORMAT_VERSION = 1

# Each transaction adds two offsets to a marker partition (the marker and its commit or abort
# control record): the first window covers eight transactions, and doubles until it finds one.
_FIRST_WINDOW = 16
# A marker read (one ListOffsets, one or two fetches) takes ~25 ms here; the limit must stay under
# Spark's patience for a task. A broker slower than this is unavailable, and the task is retried.
READ_TIMEOUT_S = 30.0
# Finding the transaction coordinator and fencing an older producer takes 0.1-1 s here; a
# coordinator slower than this is unavailable. Metadata and admin requests share the limit.
INIT_TIMEOUT_S = 30.0

# librdkafka's local error codes are public API, named with a leading underscore.
_PARTITION_EOF = KafkaError._PARTITION_EOF  # noqa: SLF001
_TOPIC_NAME = re.compile(r"^[A-Za-z0-9._-]{1,249}$")
_LOG = logging.getLogger(__name__)
CLIENT_LOG = logging.getLogger("sinks.kafka.librdkafka")  # librdkafka's own log lines go here


def client_settings(conf: dict[str, Any]) -> dict[str, Any]:
    """`conf` for any client of the sink: logs routed to Python, topics never auto-created.

    A metadata request for a missing topic would otherwise create it with the broker's defaults
    (one partition, an unrelated cleanup policy), and `setup` could not repair that.
    """
    return {**conf, "logger": CLIENT_LOG, "allow.auto.create.topics": False}


def default_marker_topic(app: str, output: str) -> str:
    return f"dstreams.markers.{app}.{output}"


def check_topic_name(name: str, what: str) -> None:
    """Raise `ConfigError` unless `name` is a legal Kafka topic name."""
    if not _TOPIC_NAME.match(name) or name in {".", ".."}:
        msg = (
            f"{what} {name!r} is not a legal Kafka topic name; expected 1-249 characters from "
            "[A-Za-z0-9._-]; rename the app or output, or name the topic explicitly"
        )
        raise ConfigError(msg)


@dataclass(frozen=True)
class Marker:
    """Records that `batch_time` of (app, output, partition) is committed to the output topic."""

    app: str
    output: str
    partition: int
    batch_time: int

    @property
    def record_key(self) -> bytes:
        return f"{self.app}/{self.output}/{self.partition}".encode()

    def to_json(self) -> dict[str, Any]:
        fields = ("app", "output", "partition", "batch_time")
        return {"v": MARKER_FORMAT_VERSION, **{name: getattr(self, name) for name in fields}}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Marker:
        return cls(
            str(data["app"]), str(data["output"]), int(data["partition"]), int(data["batch_time"])
        )

    def encode(self) -> bytes:
        return json.dumps(self.to_json(), separators=(",", ":"), sort_keys=True).encode()


class MarkerReader:
    """Reads last committed markers; assigned partitions only, never joins a group or commits."""

    def __init__(self, conf: dict[str, Any]) -> None:
        settings = {
            "group.id": "dstreams-marker-reader",  # librdkafka demands one even for assign()
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "auto.offset.reset": "earliest",
            # A tail read ends at the end of the log, where the broker would otherwise hold each
            # fetch for the 500 ms default, waiting for data that is not coming.
            "fetch.wait.max.ms": 10,
        }
        self.consumer = Consumer({**client_settings(conf), **settings})
        self._lock = threading.Lock()

    def last(self, topic: str, expected: Marker) -> int | None:
        """The batch time of the last committed marker with `expected`'s key, or None."""
        return self.last_of(topic, [expected])[expected.partition]

    def last_of(self, topic: str, expected: list[Marker]) -> dict[int, int | None]:
        """`last` for several partitions of `topic` at once, by partition: one pass, not many."""
        with self._lock:
            ends = {
                m.partition: self._end_offsets(TopicPartition(topic, m.partition)) for m in expected
            }
            wanted = {m.partition: m for m in expected}
            found: dict[int, int | None] = {}
            window = _FIRST_WINDOW
            while len(found) < len(wanted):
                starts = {p: max(lo, hi - window) for p, (lo, hi) in ends.items() if p not in found}
                found.update({p: None for p, start in starts.items() if start >= ends[p][1]})
                tails = self._read_tails(topic, {p: s for p, s in starts.items() if p not in found})
                for p, marker in tails.items():
                    if marker is not None or starts[p] <= ends[p][0]:
                        found[p] = (
                            None if marker is None else _checked(marker, wanted[p]).batch_time
                        )
                window *= 2
            return found

    def wait_until_visible(self, topic: str, partition: int, offset: int) -> None:
        """Block until `read_committed` readers see the record at `offset`.

        ``commit_transaction()`` returns once the coordinator has logged the decision; the commit
        control records reach the partitions a few milliseconds later. A marker read in that gap
        would miss a committed marker, so a write returns only once its marker is visible. (A
        new producer needs no such wait: ``init_transactions()`` returns after the gap closes.)
        """
        deadline = time.monotonic() + READ_TIMEOUT_S
        tp = TopicPartition(topic, partition)
        with self._lock:
            while self._end_offsets(tp)[1] <= offset:
                if time.monotonic() > deadline:
                    msg = (
                        f"{_name(tp)}: the committed marker at offset {offset} is still not "
                        f"visible after {READ_TIMEOUT_S:.0f} s; retry the task (it will skip)"
                    )
                    raise SinkError(msg)
                time.sleep(0.002)

    def _end_offsets(self, tp: Any) -> tuple[int, int]:
        """`(low, last stable offset)`; failovers are waited out until `READ_TIMEOUT_S`."""
        try:
            return end_offsets(self.consumer, tp, time.monotonic() + READ_TIMEOUT_S)
        except KafkaException as exc:
            msg = f"could not find the end of {_name(tp)}: {exc.args[0]}; retry the task"
            raise SinkError(msg) from exc

    def _read_tails(self, topic: str, starts: dict[int, int]) -> dict[int, Any]:
        """The last committed record of each partition in `[start, end)`, or None, by partition."""
        if not starts:
            return {}
        self.consumer.assign([TopicPartition(topic, p, start) for p, start in starts.items()])
        try:
            last: dict[int, Any] = dict.fromkeys(starts)
            pending = set(starts)
            deadline = time.monotonic() + READ_TIMEOUT_S
            while pending:
                message = self.consumer.poll(max(0.0, deadline - time.monotonic()))
                error = None if message is None else message.error()
                if message is None or (error is not None and error.fatal()):
                    where = f"marker topic {topic}, partitions {sorted(pending)}"
                    msg = f"reading {where} failed: {error or 'no answer'}; retry the task"
                    raise SinkError(msg)
                if error is None:
                    last[message.partition()] = message
                elif error.code() == _PARTITION_EOF:
                    pending.discard(message.partition())
                else:  # transient (a broker restarting, a leader moving): librdkafka retries
                    _LOG.debug("reading marker topic %s: %s", topic, error)
            return last
        finally:
            self.consumer.unassign()


def _name(tp: Any) -> str:
    return f"marker partition {tp.topic}[{tp.partition}]"


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


class TransactionalProducer:
    """A producer that has run `init_transactions()`, and the partition counts it has seen."""

    def __init__(self, settings: dict[str, Any]) -> None:
        self.producer = Producer(client_settings(settings))
        # A metadata request first waits for a broker connection. Without it, librdkafka may
        # look for the transaction coordinator before any connection is up and retry only after
        # 500 ms: about every second new producer took 0.5 s here instead of 0.07 s.
        self.producer.list_topics(timeout=INIT_TIMEOUT_S)
        self.producer.init_transactions(INIT_TIMEOUT_S)
        self._partitions: dict[str, int] = {}
        # The last committed marker of this producer's partition, once read or committed. No
        # other producer can commit for the same transactional.id without fencing this one,
        # which its next transaction would discover, so the value stays true for its lifetime.
        self.marker_known = False
        self.marker: int | None = None

    def remember_marker(self, batch_time: int | None) -> None:
        self.marker_known, self.marker = True, batch_time

    def require_partition(self, topic: str, partition: int) -> int:
        """The partition count of `topic`; `SinkError` unless it has `partition`."""
        if partition >= self._partitions.get(topic, 0):
            self._partitions[topic] = partition_count(self.producer, topic)
        count = self._partitions[topic]
        if partition >= count:
            msg = (
                f"topic {topic} has {count} partitions, expected at least {partition + 1}; run the "
                "sink's setup() first, with marker_partitions >= the number of tasks of the output"
            )
            raise SinkError(msg)
        return count

    def close(self) -> None:
        """Drop queued records and close; an open transaction is aborted if Kafka still can."""
        try:
            with warnings.catch_warnings(record=True) as caught:
                self.producer.purge()
                self.producer.close()  # warns when it cannot abort, e.g. once fenced
        except (KafkaException, RuntimeError) as exc:
            _LOG.debug("closing a discarded producer failed: %s", exc)
        for warning in caught:
            _LOG.debug("closing a discarded producer: %s", warning.message)


# -- which process on this host initialized each transactional.id last --


class ProducerOwners:
    """A host-local note of the process that last ran `init_transactions()` for an id.

    Spark hands task `p` to whichever Python worker is free, so the producer of
    `transactional.id ...-p` moves between workers from batch to batch, and each move fences
    the previous worker's cached producer. Without this note, the fenced worker would learn it
    only from a failed transaction, about 0.5 s later. With it, a worker sees before its next
    write that another process has taken the id, and makes a new producer at once.

    An optimization only: a note that is missing, unreadable or stale costs one failed
    transaction, never correctness, since the broker enforces the fencing itself. Producers on
    other hosts (a cluster's executors) leave no note here and are found the old way.
    """

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._token = ""
        self._token_pid = -1

    def claim(self, settings: dict[str, Any]) -> None:
        """Note that this process has just initialized the producer of `settings`."""
        note = self._note(settings)
        try:
            self.folder.mkdir(mode=0o700, parents=True, exist_ok=True)
            temporary = note.with_name(f"{note.name}.{os.getpid()}.tmp")
            temporary.write_text(self.token())
            temporary.replace(note)
        except OSError as exc:
            _LOG.debug("could not note the owner of a transactional.id: %s", exc)

    def taken_by_another(self, settings: dict[str, Any]) -> bool:
        """Whether another process on this host has initialized the same id since we did."""
        try:
            return self._note(settings).read_text() != self.token()
        except OSError:
            return False

    def token(self) -> str:
        """This process's identity: a PID can be reused, a random token per process cannot."""
        if self._token_pid != os.getpid():  # a forked child is another process
            self._token, self._token_pid = f"{os.getpid()}-{uuid.uuid4().hex}", os.getpid()
        return self._token

    def _note(self, settings: dict[str, Any]) -> Path:
        identity = f"{settings.get('bootstrap.servers')}\n{settings['transactional.id']}"
        return self.folder / hashlib.sha256(identity.encode()).hexdigest()[:32]


OWNERS = ProducerOwners(Path(tempfile.gettempdir()) / f"dstreams-producers-{os.getuid()}")

# -- this process's clients: cached across tasks and batches (DESIGN.md §9) --

_PRODUCERS: dict[Any, TransactionalProducer] = {}
_READERS: dict[Any, MarkerReader] = {}
_CLIENTS_LOCK = threading.Lock()


def _fingerprint(settings: dict[str, Any]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted((name, str(value)) for name, value in settings.items()))


def transactional_producer(settings: dict[str, Any]) -> TransactionalProducer:
    """This process's producer for `settings` (which include its transactional.id).

    A cached producer whose id another local process has initialized since is fenced: it is
    replaced before it wastes a transaction (see `ProducerOwners`).
    """
    with _CLIENTS_LOCK:
        cached = _PRODUCERS.get(_fingerprint(settings))
        if cached is not None and OWNERS.taken_by_another(settings):
            del _PRODUCERS[_fingerprint(settings)]
            cached.close()
            cached = None
        if cached is None:
            cached = _PRODUCERS[_fingerprint(settings)] = TransactionalProducer(settings)
            OWNERS.claim(settings)
        return cached


def discard_producer(producer: TransactionalProducer) -> None:
    """Forget and close `producer`; the next `transactional_producer` call makes a new one."""
    with _CLIENTS_LOCK:
        for fingerprint, cached in list(_PRODUCERS.items()):
            if cached is producer:
                del _PRODUCERS[fingerprint]
    producer.close()


def marker_reader(conf: dict[str, str]) -> MarkerReader:
    """This process's marker reader for a client configuration."""
    with _CLIENTS_LOCK:
        cached = _READERS.get(_fingerprint(conf))
        if cached is None:
            cached = _READERS[_fingerprint(conf)] = MarkerReader(conf)
        return cached


def close_clients() -> None:
    """Close every cached producer and reader of this process (worker shutdown, tests)."""
    with _CLIENTS_LOCK:
        producers, readers = list(_PRODUCERS.values()), list(_READERS.values())
        _PRODUCERS.clear()
        _READERS.clear()
    for producer in producers:
        producer.close()
    for reader in readers:
        reader.consumer.close()


# -- administration, driver-side --


def partition_count(client: Any, topic: str) -> int:
    """How many partitions `topic` has now (0 if it does not exist), asked of any client."""
    found = client.list_topics(topic, timeout=INIT_TIMEOUT_S).topics.get(topic)
    return 0 if found is None or found.error is not None else len(found.partitions)


def broker_transaction_limit(admin: Any) -> int:
    """The smallest `transaction.max.timeout.ms` among the cluster's brokers."""
    brokers = sorted(admin.list_topics(timeout=INIT_TIMEOUT_S).brokers)
    limits = []
    for broker in brokers:
        # One BROKER resource per call: librdkafka refuses several (_CONFLICT).
        resource = ConfigResource(ResourceType.BROKER, str(broker))
        future = admin.describe_configs([resource], request_timeout=INIT_TIMEOUT_S)[resource]
        limits.append(int(future.result(INIT_TIMEOUT_S)["transaction.max.timeout.ms"].value))
    return min(limits)


def ensure_topic(
    admin: Any, topic: str, partitions: int, rf: int, config: dict[str, str], grow: bool
) -> None:
    """Create `topic` if missing; if it has fewer partitions, grow it (`grow`) or warn."""
    count = expected = partition_count(admin, topic)
    if count == 0:
        expected = partitions
        future = admin.create_topics([NewTopic(topic, partitions, rf, config=config)])[topic]
        _settle(future, KafkaError.TOPIC_ALREADY_EXISTS, f"creating topic {topic}")
        _LOG.info("created topic %s (%d partitions, replication %d)", topic, partitions, rf)
    elif count < partitions and grow:
        expected = partitions
        future = admin.create_partitions([NewPartitions(topic, partitions)])[topic]
        _settle(future, None, f"growing topic {topic} from {count} to {partitions} partitions")
    elif count != partitions:
        _LOG.warning("topic %s has %d partitions, configured %d; kept", topic, count, partitions)
    _wait_for_leaders(admin, topic, expected)


def _wait_for_leaders(admin: Any, topic: str, partitions: int) -> None:
    """Block until `topic` has `partitions` partitions with leaders in the cluster's metadata.

    The controller acknowledges a creation before every broker knows the topic; a task started
    at once could otherwise find no partitions, or no leader, and fail.
    """
    deadline = time.monotonic() + INIT_TIMEOUT_S
    while True:
        found = admin.list_topics(topic, timeout=INIT_TIMEOUT_S).topics.get(topic)
        leaders = [] if found is None else [p.leader for p in found.partitions.values()]
        if len(leaders) >= partitions and min(leaders, default=0) >= 0:
            return
        if time.monotonic() > deadline:
            msg = (
                f"topic {topic} still lacks partitions or leaders after {INIT_TIMEOUT_S:.0f} s "
                f"(leaders {leaders}, expected {partitions} partitions); check the brokers"
            )
            raise SinkError(msg)
        time.sleep(0.1)


def _settle(future: Any, tolerated: int | None, what: str) -> None:
    """Wait for an admin request; the `tolerated` error means another process won a race."""
    try:
        future.result(INIT_TIMEOUT_S)
    except KafkaException as exc:
        if tolerated is None or exc.args[0].code() != tolerated:
            msg = f"{what} failed: {exc.args[0]}; check the broker logs and the client's ACLs"
            raise SinkError(msg) from exc
