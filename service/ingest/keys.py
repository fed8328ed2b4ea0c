"""Idempotency keys: which requests were already written, remembered in memory and in Kafka.

A request with an ``Idempotency-Key`` is written in one transaction together with a record in the
keys topic (key: the idempotency key; value: the request's fingerprint, source, record count and
time). The topic is compacted and time-limited (``cleanup.policy=compact,delete``,
``retention.ms`` = ``ingest.key_retention_ms``), so it holds the latest use of each recent key.

`KeyLedger` is the in-memory view: loaded from the topic (``read_committed``) when the endpoint
starts, extended as transactions commit, and read again from where it stopped after a failure
whose outcome was unknown.

A key expires `retention_ms` after its keys-topic record's timestamp in Kafka (the topic stamps
records with the broker's append time), the same clock the topic's retention deletes it by, never
the endpoint's own. At start-up only records still live are read (from the offset of the
retention horizon's timestamp). The ledger holds at most `max_keys` live keys: past that a new
key is refused (429, retry when the oldest expires), never made room for by forgetting one.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import sys
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from connectors.kafka_client import TopicRole
from service.errors import IngestError

log = logging.getLogger(__name__)
KEY_RECORD_VERSION = 1
PARTITION = 0
# Creating the topic and reading it back are metadata and fetch requests; a cluster slower than
# this to answer them is unavailable.
TIMEOUT_S = 30.0
KEYS_TOPIC = TopicRole("idempotency keys topic", IngestError)


def default_keys_topic(app_id: str) -> str:
    return f"dstreams.ingest-keys.{app_id}"


@dataclass(frozen=True, slots=True)
class KeyEntry:
    """The first acknowledged use of an idempotency key."""

    source: str
    fingerprint: str
    records: int
    at_ms: int

    def encode(self) -> bytes:
        document = {
            "v": KEY_RECORD_VERSION,
            "source": self.source,
            "fingerprint": self.fingerprint,
            "records": self.records,
            "at_ms": self.at_ms,
        }
        return json.dumps(document, separators=(",", ":")).encode()

    @classmethod
    def decode(cls, value: bytes) -> KeyEntry:
        document = json.loads(value)
        if document.get("v") != KEY_RECORD_VERSION:
            msg = f"keys record of version {document.get('v')!r}; expected {KEY_RECORD_VERSION}"
            raise ValueError(msg)
        return cls(
            sys.intern(str(document["source"])),  # a few sources shared by many keys
            str(document["fingerprint"]),
            int(document["records"]),
            int(document["at_ms"]),
        )


def now_ms() -> int:
    return time.time_ns() // 1_000_000


class KeyLedger:
    """Recent idempotency keys, oldest first; thread-safe; forgets keys after `retention_ms`
    and holds at most `max_keys` (None: no bound) live ones (see the module docstring)."""

    def __init__(
        self, retention_ms: int, max_keys: int | None = None, clock: Callable[[], int] = now_ms
    ) -> None:
        self.retention_ms = retention_ms
        self.max_keys = max_keys
        self._clock = clock
        self._entries: OrderedDict[str, KeyEntry] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: str) -> KeyEntry | None:
        with self._lock:
            self._forget_expired()
            return self._entries.get(key)

    def add(self, key: str, entry: KeyEntry) -> None:
        """Remember `key`; an entry already past retention (read back late) is ignored."""
        with self._lock:
            if entry.at_ms <= self._clock() - self.retention_ms:
                return
            self._entries.pop(key, None)
            self._entries[key] = entry
            self._forget_expired()

    def full(self, pending: int = 0) -> bool:
        """Whether `pending` keys being written leave no room for one more."""
        with self._lock:
            self._forget_expired()
            return self.max_keys is not None and len(self._entries) + pending >= self.max_keys

    def seconds_until_room(self) -> int:
        """Whole seconds until the oldest key expires (at least 1): a client's Retry-After."""
        with self._lock:
            if not self._entries:
                return 1
            oldest = next(iter(self._entries.values()))
            left_ms = oldest.at_ms + self.retention_ms - self._clock()
            return max(1, -(-left_ms // 1000))

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    def _forget_expired(self) -> None:
        horizon = self._clock() - self.retention_ms
        while self._entries:
            key, oldest = next(iter(self._entries.items()))
            if oldest.at_ms > horizon:
                return
            del self._entries[key]


# --- the keys topic ---------------------------------------------------------------------------


def topic_config(retention_ms: int) -> dict[str, str]:
    """Compacted (one record per key) and time-limited (keys expire); segments roll at half the
    retention so expired keys leave the disk within about 1.5 times the retention."""
    return {
        # Keys expire by the broker's clock, as retention deletes them (module docstring).
        "message.timestamp.type": "LogAppendTime",
        "cleanup.policy": "compact,delete",
        "retention.ms": str(retention_ms),
        "segment.ms": str(max(60_000, retention_ms // 2)),
    }


def ensure_keys_topic(admin: Any, topic: str, retention_ms: int, replication: int | None) -> None:
    """Create the keys topic (one partition) if missing and wait until it has a leader."""
    from connectors.kafka_client import TopicSpec, ensure_topic

    # -1: the brokers' default.replication.factor.
    spec = TopicSpec(topic, 1, replication or -1, topic_config(retention_ms))
    # Only partition 0 is used; a topic created by hand with more is kept, with a warning.
    ensure_topic(admin, spec, KEYS_TOPIC, "keep", TIMEOUT_S)


def read_keys(conf: dict[str, str], topic: str, ledger: KeyLedger, start: int) -> int:
    """Adds every committed key record from offset `start` to the end into `ledger`; returns the
    offset to continue from next time."""
    from connectors.kafka_client import CommittedTail

    tail = CommittedTail(conf, f"dstreams-ingest-keys-{uuid.uuid4().hex[:8]}", KEYS_TOPIC)
    try:
        low, end = tail.end_offsets(topic, PARTITION, TIMEOUT_S)
        first = max(start, low)
        if start == 0:  # the first read: only what is still live
            first = max(first, _first_live_offset(tail.consumer, topic, ledger, end))
        if first >= end:
            return max(start, end)
        # However many keys there are, reading stops only when it stops making progress.
        bounds = {PARTITION: (first, end)}
        for message in tail.stream(topic, bounds, TIMEOUT_S, while_progressing=True):
            _remember(ledger, topic, message)
        return end
    finally:
        tail.close()


def _first_live_offset(consumer: Any, topic: str, ledger: KeyLedger, end: int) -> int:
    """The offset of the first record stamped at or after the retention horizon (or `end`)."""
    from confluent_kafka import TopicPartition

    horizon = TopicPartition(topic, PARTITION, now_ms() - ledger.retention_ms)
    (found,) = consumer.offsets_for_times([horizon], TIMEOUT_S)
    return int(found.offset) if found.offset >= 0 else end


def _remember(ledger: KeyLedger, topic: str, message: Any) -> None:
    try:
        entry = KeyEntry.decode(message.value())
        kind, stamp = message.timestamp()
        if kind != 0 and stamp > 0:  # 0: TIMESTAMP_NOT_AVAILABLE
            entry = dataclasses.replace(entry, at_ms=stamp)
        ledger.add(message.key().decode(), entry)
    except (ValueError, KeyError, AttributeError) as exc:
        log.warning("keys topic %s offset %d: skipped (%s)", topic, message.offset(), exc)
