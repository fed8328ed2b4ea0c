"""Idempotency keys: which requests were already written, remembered in memory and in Kafka.

A request with an ``Idempotency-Key`` is written in one transaction together with a record in the
keys topic (key: the idempotency key; value: the request's fingerprint, source, record count and
time). The topic is compacted and time-limited (``cleanup.policy=compact,delete``,
``retention.ms`` = ``ingest.key_retention_ms``), so it holds the latest use of each recent key.

`KeyLedger` is the in-memory view: loaded from the topic (``read_committed``) when the endpoint
starts, extended as transactions commit, and read again from where it stopped after a failure
whose outcome was unknown. A key is forgotten `retention_ms` after its request was acknowledged.
"""

from __future__ import annotations

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

from service.errors import IngestError

log = logging.getLogger(__name__)
KEY_RECORD_VERSION = 1
PARTITION = 0
# Creating the topic and reading it back are metadata and fetch requests; a cluster slower than
# this to answer them is unavailable.
TIMEOUT_S = 30.0


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
    """Recent idempotency keys, oldest first; thread-safe; forgets keys after `retention_ms`."""

    def __init__(self, retention_ms: int, clock: Callable[[], int] = now_ms) -> None:
        self.retention_ms = retention_ms
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
        "cleanup.policy": "compact,delete",
        "retention.ms": str(retention_ms),
        "segment.ms": str(max(60_000, retention_ms // 2)),
    }


def ensure_keys_topic(admin: Any, topic: str, retention_ms: int, replication: int | None) -> None:
    """Create the keys topic (one partition) if missing and wait until it has a leader."""
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import NewTopic

    if topic not in admin.list_topics(timeout=TIMEOUT_S).topics:
        # -1: the brokers' default.replication.factor.
        new = NewTopic(topic, 1, replication or -1, config=topic_config(retention_ms))
        try:
            admin.create_topics([new], operation_timeout=TIMEOUT_S)[topic].result(TIMEOUT_S)
            log.info("created the idempotency keys topic %s", topic)
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                msg = (
                    f"could not create the idempotency keys topic {topic!r}: "
                    f"{exc.args[0].str()}. Create it by hand (1 partition, cleanup.policy="
                    "compact,delete) or set ingest.keys_topic to one that exists."
                )
                raise IngestError(msg) from exc
    _wait_for_leader(admin, topic)


def _wait_for_leader(admin: Any, topic: str) -> None:
    deadline = time.monotonic() + TIMEOUT_S
    while True:
        found = admin.list_topics(topic, timeout=TIMEOUT_S).topics.get(topic)
        leaders = [] if found is None else [p.leader for p in found.partitions.values()]
        if leaders and min(leaders) >= 0:
            if len(leaders) != 1:
                log.warning("keys topic %s has %d partitions; only 0 is used", topic, len(leaders))
            return
        if time.monotonic() > deadline:
            msg = f"keys topic {topic!r} has no leader after {TIMEOUT_S:.0f}s; check the brokers"
            raise IngestError(msg)
        time.sleep(0.1)


def read_keys(conf: dict[str, str], topic: str, ledger: KeyLedger, start: int) -> int:
    """Adds every committed key record from offset `start` to the end into `ledger`; returns the
    offset to continue from next time."""
    from confluent_kafka import Consumer, TopicPartition

    from connectors.kafka_client import end_offsets

    consumer = Consumer(
        {
            **conf,
            "group.id": f"dstreams-ingest-keys-{uuid.uuid4().hex[:8]}",  # never commits
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
            "auto.offset.reset": "earliest",
            "fetch.wait.max.ms": 20,
        }
    )
    try:
        tp = TopicPartition(topic, PARTITION)
        low, end = end_offsets(consumer, tp, time.monotonic() + TIMEOUT_S)
        if max(start, low) >= end:
            return max(start, end)
        consumer.assign([TopicPartition(topic, PARTITION, max(start, low))])
        _consume_until(consumer, topic, end, ledger)
        return end
    finally:
        consumer.close()


def _consume_until(consumer: Any, topic: str, end: int, ledger: KeyLedger) -> None:
    from confluent_kafka import KafkaError

    # However many keys there are, reading stops only when it stops making progress.
    deadline = time.monotonic() + TIMEOUT_S
    while time.monotonic() < deadline:
        messages = consumer.consume(10_000, 0.5)
        if messages:
            deadline = time.monotonic() + TIMEOUT_S
        for message in messages:
            error = message.error()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:  # noqa: SLF001 - librdkafka's name
                    return
                msg = f"reading the idempotency keys topic {topic!r} failed: {error.str()}"
                raise IngestError(msg)
            _remember(ledger, topic, message)
            if message.offset() + 1 >= end:
                return
    msg = (
        f"reading the idempotency keys topic {topic!r} made no progress for {TIMEOUT_S:.0f}s "
        f"before offset {end}; check its leader"
    )
    raise IngestError(msg)


def _remember(ledger: KeyLedger, topic: str, message: Any) -> None:
    try:
        ledger.add(message.key().decode(), KeyEntry.decode(message.value()))
    except (ValueError, KeyError, AttributeError) as exc:
        log.warning("keys topic %s offset %d: skipped (%s)", topic, message.offset(), exc)
