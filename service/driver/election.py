"""Which driver of an app is the active one, for warm standby (docs/architecture.md, Recovery).

With `standby.enabled` every driver starts Spark, builds the job and warms its Python workers,
then waits here until it is elected; only then does it open the journal, which takes the next
epoch and fences every older driver exactly as a cold restart does. The election decides *when*
a driver takes over (liveness); the journal's fencing alone keeps the output exact (safety), so a
mistaken election can cost a take-over but never a duplicate or a loss.

- **Kafka journal**: every driver joins the consumer group ``dstreams-driver-<app>`` subscribed
  to the journal topic (one partition). The member the group assigns that partition to is the
  active driver. A killed driver stops heartbeating and the brokers reassign the partition after
  `standby.session_timeout_ms`; a driver that stops gracefully leaves the group at once. The
  sticky assignor keeps the partition where it is when a new standby joins. No offsets are ever
  committed: the group is used for its membership only.
- **File journal**: an exclusive `flock` on ``<journal>.leader``, held for the driver's lifetime.
  The kernel releases it the instant the holder dies, so a standby on the same host (or on a
  volume with working `flock`) takes over at once.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import operator
import os
import threading
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any, Protocol

from service.config.settings import Settings
from service.journal.base import Journal
from service.journal.file import FileJournal
from service.journal.kafka import PARTITION, KafkaJournal

log = logging.getLogger(__name__)

# How often a waiting driver looks again; also bounds how long a stop request waits.
POLL_S = 0.05
# A driver's poll loop runs in its own thread, so only a stuck process would miss this.
MAX_POLL_INTERVAL_MS = 300_000


Heartbeat = Callable[[], None]


class Election(Protocol):
    """Blocks until this driver is the active one; kept for the driver's lifetime."""

    def wait_until_elected(self, stopping: threading.Event, waiting: Heartbeat) -> bool:
        """True once elected; False if `stopping` was set first. Calls `waiting()` every
        `POLL_S` meanwhile (a waiting standby is alive: `/healthz` stays green)."""
        ...

    def close(self) -> None:
        """Give up the leadership (a standby takes over at once) and release resources."""
        ...


def group_id(app_id: str) -> str:
    """The consumer group whose journal-partition holder is the app's active driver."""
    return f"dstreams-driver-{app_id}"


def make_election(settings: Settings, journal: Journal) -> Election:
    """The election that fits the configured journal."""
    if isinstance(journal, KafkaJournal):
        return KafkaGroupElection(journal, settings.standby.session_timeout_ms)
    if isinstance(journal, FileJournal):
        return FileLockElection(journal.path.with_name(journal.path.name + ".leader"))
    msg = f"warm standby needs a file or kafka journal, not {type(journal).__name__}"
    raise TypeError(msg)


class FileLockElection:
    """Elected while holding an exclusive `flock` on `path`; the kernel frees it on death."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None

    def wait_until_elected(self, stopping: threading.Event, waiting: Heartbeat) -> bool:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        while not stopping.is_set():
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                waiting()
                stopping.wait(POLL_S)
                continue
            self._fd = fd
            return True
        os.close(fd)
        return False

    def close(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)  # closing the only descriptor releases the lock


class KafkaGroupElection:
    """Elected while this member of `group_id(app)` is assigned the journal partition.

    One thread owns the consumer and polls it for the driver's whole lifetime (a member that
    stops polling is removed from the group); `elected` mirrors the current assignment.
    """

    def __init__(self, journal: KafkaJournal, session_timeout_ms: int) -> None:
        self.journal = journal
        self.conf: dict[str, Any] = {
            **journal.conf,
            "group.id": group_id(journal.app_id),
            "client.id": f"dstreams-driver-{journal.owner}",
            "session.timeout.ms": session_timeout_ms,
            "heartbeat.interval.ms": max(100, session_timeout_ms // 5),
            "max.poll.interval.ms": MAX_POLL_INTERVAL_MS,
            "partition.assignment.strategy": "cooperative-sticky",
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            # The group is for membership; nothing is read (the partition is paused on assign).
            "auto.offset.reset": "latest",
        }
        self.elected = threading.Event()
        self._closing = threading.Event()
        self._thread: threading.Thread | None = None
        self._failure: BaseException | None = None

    def wait_until_elected(self, stopping: threading.Event, waiting: Heartbeat) -> bool:
        # The topic must exist before the group can assign its partition.
        self.journal.prepare_topic()
        self._thread = threading.Thread(target=self._membership, name="driver-election")
        self._thread.daemon = True
        self._thread.start()
        while not stopping.is_set():
            if self._failure is not None:
                raise self._failure
            if self.elected.wait(POLL_S):
                return True
            waiting()
        return False

    def close(self) -> None:
        self._closing.set()
        if self._thread is not None:
            self._thread.join(30)

    def _membership(self) -> None:
        from confluent_kafka import Consumer

        try:
            consumer = Consumer(self.conf)
            consumer.subscribe(
                [self.journal.topic], on_assign=self._assigned, on_revoke=self._revoked
            )
            try:
                while not self._closing.is_set():
                    self._note_error(consumer.poll(POLL_S))
            finally:
                consumer.close()  # leaves the group: a standby is assigned at once
        except BaseException as error:  # handed to a waiting driver; an elected one logs it
            log.exception("the driver election's consumer failed")
            self._failure = error

    def _note_error(self, message: Any) -> None:
        """Group errors (e.g. a session timeout the brokers refuse) would otherwise leave a
        standby waiting in silence."""
        error = message.error() if message is not None else None
        if error is not None:
            log.warning("driver election (group %s): %s", self.conf["group.id"], error.str())

    def _assigned(self, consumer: Any, partitions: list[Any]) -> None:
        consumer.incremental_assign(partitions)
        with contextlib.suppress(Exception):  # pausing only saves fetches
            consumer.pause(partitions)
        if any(p.topic == self.journal.topic and p.partition == PARTITION for p in partitions):
            log.info("elected the active driver (group %s)", self.conf["group.id"])
            self.elected.set()

    def _revoked(self, consumer: Any, partitions: list[Any]) -> None:
        consumer.incremental_unassign(partitions)
        if self.elected.is_set() and any(p.partition == PARTITION for p in partitions):
            # Another driver will open the journal and fence this one; its next append fails.
            log.warning(
                "lost the election (group %s); expecting to be fenced", self.conf["group.id"]
            )
            self.elected.clear()


def warm_python_workers(
    sc: Any, consumer_confs: list[dict[str, str]], shuffle_partitions: int
) -> None:
    """Start every executor's Python workers, import what tasks use, and connect each worker's
    cached Kafka consumers (`connectors.reader`), before being elected. Sink producers are left
    alone: initializing their transactional ids would fence the active driver's."""
    slots = max(1, int(sc.defaultParallelism))
    warm = partial(_warm_task, consumer_confs)
    # A shuffle as well: a batch's first job otherwise pays for the JVM's and Python's first
    # shuffle write and read after the take-over.
    pairs = sc.parallelize(range(slots * 8), slots).mapPartitions(warm).map(_pair)
    pairs.reduceByKey(operator.add, shuffle_partitions).count()


def _pair(value: int) -> tuple[int, int]:
    return value % 7, 1


def _warm_task(consumer_confs: list[dict[str, str]], rows: Any) -> Any:
    import sinks.base  # noqa: F401 - imported for its load time only
    from connectors.reader import warm_consumer

    for conf in consumer_confs:
        with contextlib.suppress(Exception):  # warming is best effort; a read retries anyway
            warm_consumer(conf)
    return rows
