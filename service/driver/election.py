"""Which driver of an app is the active one, for warm standby (docs/architecture.md, Recovery).

With `standby.enabled` every driver starts Spark, builds the job and warms its Python workers,
then waits here until it is elected; only then does it open the journal, which takes the next
epoch and fences every older driver exactly as a cold restart does. The election decides *when*
a driver takes over (liveness); the journal's fencing alone keeps the output exact (safety), so a
mistaken election can cost a take-over but never a duplicate or a loss.

- **Kafka journal**: every driver joins the consumer group ``dstreams-driver-<app>`` subscribed
  to the journal topic (one partition). The member the group assigns that partition to is the
  active driver. Each driver's member runs in a small process of its own
  (`service.driver.election_member`) that leaves the group the instant the driver dies, however
  it dies, and after `standby.session_timeout_ms` if the driver is alive but silent (paused);
  a lost host or pod is noticed by the brokers after the session timeout. The
  sticky assignor keeps the partition where it is when a new standby joins. No offsets are ever
  committed: the group is used for its membership only.
- **File journal**: an exclusive `flock` on ``<journal>.leader``, held for the driver's lifetime.
  The kernel releases it the instant the holder dies, so a standby on the same host (or on a
  volume with working `flock`) takes over at once.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import operator
import os
import subprocess
import sys
import threading
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any, Protocol, TextIO

from service.config.settings import Settings
from service.driver import election_member
from service.errors import DStreamsError
from service.journal.base import Journal
from service.journal.file import FileJournal
from service.journal.kafka import PARTITION, KafkaJournal

log = logging.getLogger(__name__)

# How often a waiting driver looks again; also bounds how long a stop request waits.
POLL_S = 0.05
# A driver's poll loop runs in its own thread, so only a stuck process would miss this.
MAX_POLL_INTERVAL_MS = 300_000
HEARTBEAT_MS = 250
MEMBER_STARTED = "driver election: group member process"


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
    """Elected while this driver's member of `group_id(app)` is assigned the journal partition.

    The member is a process of its own (`service.driver.election_member`), so that a driver that
    dies leaves the group at once instead of after the session timeout; this side feeds it the
    consumer's configuration and heartbeats over a pipe and mirrors what it reports in
    `elected`.
    """

    def __init__(self, journal: KafkaJournal, session_timeout_ms: int) -> None:
        self.journal = journal
        self.session_timeout_ms = session_timeout_ms
        self.conf: dict[str, Any] = {
            **journal.conf,
            "group.id": group_id(journal.app_id),
            "client.id": f"dstreams-driver-{journal.owner}",
            "session.timeout.ms": session_timeout_ms,
            # Frequent whatever the session timeout: a standby learns that the active member
            # left from its next heartbeat's answer.
            "heartbeat.interval.ms": max(100, min(session_timeout_ms // 5, HEARTBEAT_MS)),
            # librdkafka refuses a session longer than this.
            "max.poll.interval.ms": max(MAX_POLL_INTERVAL_MS, session_timeout_ms),
            "partition.assignment.strategy": "cooperative-sticky",
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            # The group is for membership; nothing is read (the partition is paused on assign).
            "auto.offset.reset": "latest",
        }
        self.elected = threading.Event()
        self._closing = threading.Event()
        self._member: subprocess.Popen[str] | None = None
        self._threads: list[threading.Thread] = []
        self._failure: str | None = None

    def wait_until_elected(self, stopping: threading.Event, waiting: Heartbeat) -> bool:
        # The topic must exist before the group can assign its partition.
        self.journal.prepare_topic()
        self._start_member()
        while not stopping.is_set():
            if self._failure is not None:
                msg = f"the driver election (group {self.conf['group.id']}) failed: {self._failure}"
                raise ElectionError(msg)
            if self.elected.wait(POLL_S):
                return True
            waiting()
        return False

    def close(self) -> None:
        self._closing.set()
        member, self._member = self._member, None
        if member is None:
            return
        with contextlib.suppress(OSError):
            if member.stdin is not None:
                member.stdin.close()  # the member leaves the group and ends
        try:
            member.wait(30)
        except subprocess.TimeoutExpired:
            member.kill()
            member.wait(30)
        for thread in self._threads:
            thread.join(5)

    def _start_member(self) -> None:
        member = subprocess.Popen(  # noqa: S603 - this interpreter and our own module
            [sys.executable, "-m", "service.driver.election_member"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self._member = member
        log.info("%s %d (group %s)", MEMBER_STARTED, member.pid, self.conf["group.id"])
        request = {"conf": self.conf, "topic": self.journal.topic, "partition": PARTITION}
        assert member.stdin is not None and member.stdout is not None  # noqa: S101 - PIPEs
        member.stdin.write(json.dumps(request) + "\n")
        member.stdin.flush()
        self._threads = [
            threading.Thread(target=self._heartbeats, args=(member.stdin,), daemon=True),
            threading.Thread(target=self._reports, args=(member.stdout,), daemon=True),
        ]
        for thread in self._threads:
            thread.start()

    def _heartbeats(self, pipe: TextIO) -> None:
        """A line per heartbeat interval while this process runs; a paused or starved driver
        falls silent, and its member then leaves the group after the session timeout."""
        interval_s = max(0.1, self.session_timeout_ms / 5000)
        while not self._closing.wait(interval_s):
            try:
                pipe.write("\n")
                pipe.flush()
            except (OSError, ValueError):
                return

    def _reports(self, lines: TextIO) -> None:
        for line in lines:
            word, _, detail = line.strip().partition(" ")
            if word == election_member.ASSIGNED:
                log.info("elected the active driver (group %s)", self.conf["group.id"])
                self.elected.set()
            elif word == election_member.REVOKED:
                self._lost("the journal partition was assigned to another driver")
            elif word == election_member.ERROR:
                log.warning("driver election (group %s): %s", self.conf["group.id"], detail)
            elif word == election_member.FAILED:
                self._failure = detail
        if not self._closing.is_set():
            self._failure = self._failure or "its group member process ended"
            self._lost(f"the group member ended ({self._failure})")

    def _lost(self, why: str) -> None:
        if self.elected.is_set():
            # Another driver will open the journal and fence this one; its next append fails.
            log.warning(
                "lost the election (group %s): %s; expecting to be fenced",
                self.conf["group.id"],
                why,
            )
        self.elected.clear()


class ElectionError(DStreamsError):
    """The election could not run (e.g. the brokers refused the group's settings)."""


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
