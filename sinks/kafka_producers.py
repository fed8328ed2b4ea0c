"""The Kafka sink's producers: one transactional producer per task id, kept by each process.

`transactional_producer` hands out this process's producer for a task's settings (whose
``transactional.id`` is fixed per (app, output, partition)) and `discard_producer` drops one
after a failure. A host-local note of each id's last owner (`ProducerOwners`) lets a process
replace a producer that another local process has fenced before it wastes a transaction on it.
`client_settings` is the configuration every client of the sink starts from.
"""

from __future__ import annotations

import hashlib
import logging
import os
import tempfile
import time
import uuid
import warnings
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaException

from connectors.kafka_client import ADMIN_TIMEOUT_S, new_producer, partition_count
from connectors.process_cache import ConfKey, ProcessCache, conf_key
from service.errors import SinkError

_LOG = logging.getLogger(__name__)
# How long a task looks for a partition that the driver has just added: the brokers' metadata
# follows the controller within milliseconds; this must stay well under Spark's task patience.
PARTITION_WAIT_S = 10.0


def client_settings(conf: dict[str, Any]) -> dict[str, Any]:
    """`conf` for any client of the sink: topics never auto-created.

    A metadata request for a missing topic would otherwise create it with the broker's defaults
    (one partition, an unrelated cleanup policy), and `setup` could not repair that.
    """
    return {**conf, "allow.auto.create.topics": False}


class TransactionalProducer:
    """A producer that has run `init_transactions()`, and the partition counts it has seen."""

    def __init__(self, settings: dict[str, Any], producer: Any) -> None:
        self.settings = settings
        self.producer = producer
        self._partitions: dict[str, int] = {}
        # The last committed marker of this producer's partition, once read or committed. No
        # other producer can commit for the same transactional.id without fencing this one,
        # which its next transaction would discover, so the value stays true for its lifetime.
        self.marker_known = False
        self.marker: int | None = None
        self._used = False

    @classmethod
    def open(cls, settings: dict[str, Any]) -> TransactionalProducer:
        """A producer of `settings` (a `transactional_producer_config`), initialized."""
        producer = new_producer(client_settings(settings))
        # A metadata request first waits for a broker connection. Without it, librdkafka may
        # look for the transaction coordinator before any connection is up and retry only after
        # 500 ms: about every second new producer took 0.5 s here instead of 0.07 s.
        producer.list_topics(timeout=ADMIN_TIMEOUT_S)
        producer.init_transactions(ADMIN_TIMEOUT_S)
        return cls(settings, producer)

    def first_use(self) -> bool:
        """True the first time it is asked: this producer was initialized for the caller."""
        first, self._used = not self._used, True
        return first

    def remember_marker(self, batch_time: int | None) -> None:
        self.marker_known, self.marker = True, batch_time

    def require_partition(self, topic: str, partition: int) -> int:
        """The partition count of `topic`; `SinkError` unless it has `partition`.

        The driver creates the topics at setup and grows the marker topic before each write job
        (`KafkaSink.prepare_tasks`), but the broker this producer asks may learn of new partitions
        a moment after the controller: a missing one is looked for again, until a deadline.
        """
        deadline = time.monotonic() + PARTITION_WAIT_S
        while partition >= self._partitions.get(topic, 0):
            self._partitions[topic] = count = partition_count(self.producer, topic)
            if partition < count:
                break
            if time.monotonic() > deadline:
                msg = (
                    f"topic {topic} has {count} partitions, expected at least {partition + 1} "
                    f"after {PARTITION_WAIT_S:.0f} s; the driver creates the topics at setup and "
                    "grows the marker topic before each write job: check that the driver runs "
                    "this sink's setup() and prepare_tasks(), and that its client may alter topics"
                )
                raise SinkError(msg)
            time.sleep(0.1)
        return self._partitions[topic]

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

# This process's producers, kept across tasks and batches. A cached producer whose id another
# local process has initialized since is fenced: it is replaced before it wastes a transaction.
_PRODUCERS: ProcessCache[ConfKey, TransactionalProducer] = ProcessCache(
    close=TransactionalProducer.close,
    usable=lambda producer: not OWNERS.taken_by_another(producer.settings),
)


def transactional_producer(settings: dict[str, Any]) -> TransactionalProducer:
    """This process's producer for `settings` (which include its transactional.id)."""

    return _PRODUCERS.get(conf_key(settings), lambda: _make_claimed(settings))


def known_marker(settings: dict[str, Any]) -> int | None:
    """The last marker this process's producer for `settings` saw committed and visible, or
    None when there is no such producer or it has not learnt its marker yet.

    A committed marker stays committed whatever happens to the producer later (fenced, closed),
    so the value is a fact about Kafka that needs no second read."""
    producer = _PRODUCERS.peek(conf_key(settings))
    if producer is None or not producer.marker_known:
        return None
    return producer.marker


def open_producers(every_settings: list[dict[str, Any]]) -> None:
    """Initialize the producers of `every_settings` at once, in threads, and cache them.

    The driver calls this at start-up when it writes itself (`sinks.kafka`, ``write_from``), once
    it holds the journal's epoch: each `init_transactions()` fences the id's previous holder and
    settles its open transaction, which takes up to a second after a crash, so doing them side by
    side instead of one per partition in the first batch shortens the way to the first batch.
    They count as used: the first batch reports no producer opened.
    """
    with ThreadPoolExecutor(max_workers=max(1, len(every_settings))) as pool:
        made = list(pool.map(_make_claimed, every_settings))
    for producer in made:
        producer.first_use()
        cached = _PRODUCERS.get(conf_key(producer.settings), partial(_same, producer))
        if cached is not producer:  # one was already cached: keep it, drop the duplicate
            producer.close()


def _same(producer: TransactionalProducer) -> TransactionalProducer:
    return producer


def _make_claimed(settings: dict[str, Any]) -> TransactionalProducer:
    producer = TransactionalProducer.open(settings)
    OWNERS.claim(settings)
    return producer


def discard_producer(producer: TransactionalProducer) -> None:
    """Forget and close `producer`; the next `transactional_producer` call makes a new one."""
    _PRODUCERS.discard(producer)


def close_producers() -> None:
    """Close every cached producer of this process (worker shutdown, tests)."""
    _PRODUCERS.close_all()
