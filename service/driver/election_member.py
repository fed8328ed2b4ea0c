"""The Kafka driver election's group member, in a process of its own beside the driver
(`python -m service.driver.election_member`, started by `election.KafkaGroupElection`).

Why a process: a driver that dies (a crash, SIGKILL) cannot leave the consumer group, so the
brokers would elect a standby only after the session timeout (6 s by default). This process
outlives the driver by an instant: its standard input is a pipe from the driver, and when the
pipe closes (whatever ended the driver) it closes its consumer, which leaves the group at once
and lets the brokers assign the journal partition to a standby. A driver that is alive but
stuck (paused, starved) stops writing the heartbeat lines it sends on that pipe, and after the
session timeout this process leaves as well, as a silent member would be removed. A lost host or
pod takes both processes: the brokers then wait for the session timeout, as before.

Protocol: the driver writes the consumer's configuration as one JSON line (credentials travel
on the pipe, never in the command line), then an empty line every heartbeat. This process
writes `assigned`, `revoked`, `error <text>` (a group error; it carries on) and `failed <text>`
(it ends) lines as they happen.
"""

from __future__ import annotations

import contextlib
import json
import signal
import sys
import threading
import time
from typing import Any, TextIO

ASSIGNED = "assigned"
REVOKED = "revoked"
ERROR = "error"
FAILED = "failed"
POLL_S = 0.05


class ParentLink:
    """The pipe from the driver: when it last spoke, and whether it has closed."""

    def __init__(self, lines: TextIO) -> None:
        self.lines = lines
        self.last_heard = time.monotonic()
        self.closed = threading.Event()

    def listen(self) -> None:
        for _line in self.lines:
            self.last_heard = time.monotonic()
        self.closed.set()

    def alive(self, session_s: float) -> bool:
        return not self.closed.is_set() and time.monotonic() - self.last_heard < session_s


def say(word: str, detail: str = "") -> None:
    """One line to the driver; nobody to tell once it is gone."""
    with contextlib.suppress(OSError, ValueError):
        sys.stdout.write(f"{word} {detail}".rstrip() + "\n")
        sys.stdout.flush()


def on_assign(topic: str, partition: int, consumer: Any, partitions: list[Any]) -> None:
    consumer.incremental_assign(partitions)
    with contextlib.suppress(Exception):  # pausing only saves fetches
        consumer.pause(partitions)
    if any(p.topic == topic and p.partition == partition for p in partitions):
        say(ASSIGNED)


def on_revoke(topic: str, partition: int, consumer: Any, partitions: list[Any]) -> None:
    consumer.incremental_unassign(partitions)
    if any(p.topic == topic and p.partition == partition for p in partitions):
        say(REVOKED)


def serve(conf: dict[str, Any], topic: str, partition: int, link: ParentLink) -> None:
    """Membership until the driver goes silent or away; then leave the group."""
    from functools import partial

    from connectors.kafka_client import new_consumer

    session_s = int(conf["session.timeout.ms"]) / 1000
    consumer = new_consumer(conf)
    try:
        consumer.subscribe(
            [topic],
            on_assign=partial(on_assign, topic, partition),
            on_revoke=partial(on_revoke, topic, partition),
        )
        while link.alive(session_s):
            message = consumer.poll(POLL_S)
            error = message.error() if message is not None else None
            if error is not None:
                say(ERROR, error.str())
    finally:
        consumer.close()  # leaves the group: the brokers assign the partition at once


def main() -> int:
    # The driver decides when this process ends (by closing the pipe): a Ctrl-C or SIGTERM
    # meant for the driver must not end the membership under it.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    request = json.loads(sys.stdin.readline())
    link = ParentLink(sys.stdin)
    threading.Thread(target=link.listen, name="driver-link", daemon=True).start()
    try:
        serve(request["conf"], request["topic"], int(request["partition"]), link)
    except Exception as error:  # noqa: BLE001 - reported to the driver, which decides
        say(FAILED, f"{type(error).__name__}: {error}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
