"""The committed tail of a topic's partitions: what a ``read_committed`` reader finds at the end.

The Kafka sink reads the last marker of a partition and the Kafka journal its records since the
last snapshot. Both read backwards from the last stable offset in growing windows, since
transaction control records and aborted appends occupy offsets too and a window counted in
records would be wrong. The ingest endpoint streams its idempotency keys forward to the end.
The consumer only assigns partitions: it never joins its group, never commits, and starts from
``auto.offset.reset=earliest`` where retention removed a window's start.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, TypeVar

from confluent_kafka import KafkaError, TopicPartition

from connectors.kafka_client.errors import PARTITION_EOF, TopicRole, is_fatal
from connectors.kafka_client.factory import new_consumer
from connectors.kafka_client.watermarks import end_offsets

T = TypeVar("T")
Bounds = Mapping[int, tuple[int, int]]
"""`[start, end)` offsets by partition."""

_LOG = logging.getLogger(__name__)

_TAIL_SETTINGS: dict[str, Any] = {
    "isolation.level": "read_committed",
    "enable.auto.commit": False,
    "enable.auto.offset.store": False,
    "enable.partition.eof": True,
    "auto.offset.reset": "earliest",
    # A tail read ends at the end of the log, where the broker would otherwise hold each fetch for
    # the 500 ms default, waiting for data that is not coming.
    "fetch.wait.max.ms": 10,
}


class CommittedTail:
    """A ``read_committed`` consumer that reads offset ranges of assigned partitions.

    ``group_id`` is required by librdkafka even for ``assign()``; it is never joined. Failures
    raise ``role.error``, naming the topic as ``role.kind``. Not thread-safe: callers that share
    one serialise their reads.
    """

    def __init__(self, conf: Mapping[str, Any], group_id: str, role: TopicRole) -> None:
        self.consumer = new_consumer(conf, settings={"group.id": group_id, **_TAIL_SETTINGS})
        self.role = role

    def close(self) -> None:
        self.consumer.close()

    def end_offsets(
        self,
        topic: str,
        partition: int,
        timeout_s: float,
        give_up: Callable[[KafkaError], bool] = is_fatal,
    ) -> tuple[int, int]:
        """`(low, last stable offset)`; see `end_offsets` for the retries and `give_up`."""
        deadline = time.monotonic() + timeout_s
        return end_offsets(self.consumer, TopicPartition(topic, partition), deadline, give_up)

    def read(
        self,
        topic: str,
        bounds: Bounds,
        timeout_s: float,
        give_up: Callable[[KafkaError], bool] = is_fatal,
    ) -> dict[int, list[Any]]:
        """The committed records in `[start, end)` of each partition, by partition, in order.

        A range ends early where the partition does. An error event that `give_up` accepts
        fails the read at once; others (a broker restarting, a leader moving) are left to
        librdkafka's retries until `timeout_s` runs out.
        """
        found: dict[int, list[Any]] = {p: [] for p in bounds}
        for message in self.stream(topic, bounds, timeout_s, give_up):
            found[message.partition()].append(message)
        return found

    def stream(
        self,
        topic: str,
        bounds: Bounds,
        timeout_s: float,
        give_up: Callable[[KafkaError], bool] = is_fatal,
        *,
        while_progressing: bool = False,
    ) -> Iterator[Any]:
        """`read`'s records one by one as they arrive, in order within each partition.

        `timeout_s` bounds the whole read, or with `while_progressing` each wait for the next
        record: a range too long to read within any fixed time then ends only when it stalls.
        """
        pending = {p for p, (start, end) in bounds.items() if start < end}
        if not pending:
            return
        self.consumer.assign([TopicPartition(topic, p, bounds[p][0]) for p in sorted(pending)])
        try:
            deadline = time.monotonic() + timeout_s
            while pending:
                message = self.consumer.poll(max(0.0, deadline - time.monotonic()))
                if message is None:
                    msg = (
                        f"reading {self.role.kind} {topic!r}, partitions {sorted(pending)}: no "
                        f"answer within {timeout_s:.0f} s; expected their leaders to serve "
                        "fetches. Check the brokers."
                    )
                    raise self.role.error(msg)
                if self._take(topic, message, bounds, pending, give_up):
                    yield message
                    if while_progressing:
                        deadline = time.monotonic() + timeout_s
        finally:
            self.consumer.unassign()

    def read_back(
        self,
        topic: str,
        ends: Bounds,
        *,
        window: int,
        growth: int,
        decode: Callable[[Any], T],
        enough: Callable[[Sequence[T]], bool],
        timeout_s: float,
        give_up: Callable[[KafkaError], bool] = is_fatal,
    ) -> dict[int, list[T]]:
        """The decoded committed tail of each partition, back to the first window that is enough.

        `ends` holds each partition's `(low, last stable offset)`. The first window is the last
        `window` offsets; each window before it is `growth` times wider, until
        `enough(window's records)` or the partition's low offset is reached.
        """
        tails: dict[int, list[T]] = {p: [] for p in ends}
        bounds = {p: (max(low, high - window), high) for p, (low, high) in ends.items()}
        while bounds:
            chunks = self.read(topic, bounds, timeout_s, give_up)
            window *= growth
            earlier: dict[int, tuple[int, int]] = {}
            for p, (start, _) in bounds.items():
                chunk = [decode(record) for record in chunks[p]]
                tails[p] = chunk + tails[p]
                low = ends[p][0]
                if start > low and not enough(chunk):
                    earlier[p] = (max(low, start - window), start)
            bounds = earlier
        return tails

    def _take(
        self,
        topic: str,
        message: Any,
        bounds: Bounds,
        pending: set[int],
        give_up: Callable[[KafkaError], bool],
    ) -> bool:
        """Whether a polled message is a record in range; an event or the end of a range
        updates `pending`."""
        error, partition = message.error(), message.partition()
        if error is None:
            if partition not in pending:
                return False
            if message.offset() < bounds[partition][1]:
                return True
            pending.discard(partition)
        elif error.code() == PARTITION_EOF:
            pending.discard(partition)
        elif error.code() == KafkaError.GROUP_AUTHORIZATION_FAILED:
            # librdkafka looks up the coordinator of `group.id` even for a consumer that only
            # assigns; this one never joins or commits, so a principal without rights on the
            # placeholder group (least-privilege ACLs) reads on unharmed.
            _LOG.debug("reading %s %s: %s (the group is never used)", self.role.kind, topic, error)
        elif give_up(error):
            where = f"{self.role.kind} {topic!r}, partitions {sorted(pending)}"
            msg = f"reading {where} failed: {error.str()}; check the brokers and the client's ACLs"
            raise self.role.error(msg)
        else:  # transient (a broker restarting, a leader moving): librdkafka retries by itself
            _LOG.debug("reading %s %s: %s", self.role.kind, topic, error)
        return False
