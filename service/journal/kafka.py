"""Kafka journal: records in a single-partition replicated topic, appended by one fenced producer.

How it stays correct:

- **Fencing.** Every driver of an app uses one fixed ``transactional.id``,
  ``dstreams-journal.<app>.journal``. `open` calls `init_transactions()` first: the broker aborts
  any transaction the previous holder left open and bumps the producer epoch, so the old driver's
  next commit fails with a fencing error, which `append` raises as `FencedOut`. Only after that
  does `open` read the journal, so it sees everything the old driver committed and nothing it
  can still add.
- **Durability.** Each append is one transaction (idempotent producer, ``acks=all``, the topic's
  ``min.insync.replicas``); the record is durable when `commit_transaction` returns.
- **Ordering.** One partition, one writer: the partition's order is the journal's order.
- **Short reads (snapshots).** After every checkpoint record, after `open`, and every
  `snapshot_every` records, the writer appends a `SnapshotRecord` holding the compacted journal
  (see `base.compact`). A reader finds the newest snapshot by reading backwards from the end in
  growing windows and replays only from there. This needs no second topic or index that could
  disagree with the journal. Transaction markers and aborted appends also occupy offsets, hence
  the windows are counted generously.
- **Retention.** The topic is created with unlimited retention (``cleanup.policy=delete``,
  ``retention.ms=-1``): the journal is the master state and must not expire while a job is down.
  An existing topic with compaction or a finite retention is refused at `open`, naming the fix.
  Should its start be deleted anyway (low watermark > 0) and no snapshot follow, reading fails
  instead of silently starting over.
"""

from __future__ import annotations

import logging
import os
import socket
import time
import uuid
from collections.abc import Sequence
from typing import Any, NoReturn

from confluent_kafka import KafkaError, KafkaException

from connectors.kafka_client import (
    TRY_TIMEOUT_S,
    CommittedTail,
    CommitTimedOut,
    TopicRole,
    TopicSpec,
    commit_transaction,
    describe_topic,
    discard,
    ensure_topic,
    is_fatal,
    is_fenced,
    new_admin_client,
    new_transactional_producer,
)
from service.errors import FencedOut, JournalError
from service.journal.base import WritingJournal, compact, replay
from service.journal.records import (
    AnyRecord,
    CheckpointRecord,
    EpochRecord,
    JournalRecord,
    SnapshotRecord,
    decode_bytes,
    encode_bytes,
)

log = logging.getLogger(__name__)

PARTITION = 0
DEFAULT_SNAPSHOT_EVERY = 1_000
# A journal transaction carries one small record and lasts milliseconds; a driver that dies inside
# one blocks read_committed readers (e.g. `journal show`) until the broker aborts it after this.
TRANSACTION_TIMEOUT_MS = 30_000
# Snapshots can hold many batches' ranges; this caps a journal record (topic and producer alike).
MAX_MESSAGE_BYTES = 8 << 20
# Room for the record batch header, key and headers around a value within that limit.
_BATCH_OVERHEAD_BYTES = 4 << 10
JOURNAL_TOPIC = TopicRole("journal topic", JournalError)


def transactional_id_prefix(app_id: str) -> str:
    """What the journal's transactional id of `app_id` starts with: the ACL's prefix. It ends
    with a separator that no app id holds, so app ``orders``'s prefix is no prefix of app
    ``orders-eu``'s id, and an ACL granted to one app does not reach the other."""
    return f"dstreams-journal.{app_id}."


def transactional_id(app_id: str) -> str:
    """The one transactional id every driver of `app_id` shares; sharing it is what fences."""
    return f"{transactional_id_prefix(app_id)}journal"


class KafkaJournal(WritingJournal):
    """The journal in a single-partition topic; see the module docstring for the design."""

    def __init__(
        self,
        conf: dict[str, Any],
        topic: str,
        app_id: str,
        replication_factor: int,
        min_insync_replicas: int,
        *,
        owner: str | None = None,
        snapshot_every: int = DEFAULT_SNAPSHOT_EVERY,
        timeout_s: float = 60.0,
    ) -> None:
        self.conf = dict(conf)
        self.topic = topic
        self.app_id = app_id
        self.replication_factor = replication_factor
        self.min_insync_replicas = min_insync_replicas
        self.owner = owner or f"{socket.gethostname()}:{os.getpid()}"
        self.snapshot_every = snapshot_every
        # Bounds every blocking call: broker fail-over plus a leader election fit well within it.
        self.timeout_s = timeout_s
        self._producer: Any = None
        self._records: list[JournalRecord] = []
        self._since_snapshot = 0

    # --- the Journal protocol -----------------------------------------------------------------

    def open(self) -> int:
        if self._producer is not None:
            msg = f"journal topic {self.topic!r} is already open by this object"
            raise JournalError(msg)
        self.prepare_topic()
        self._producer = self._fencing_producer()
        try:
            self._records = self.read()
            epoch = 1 + max((r.epoch for r in self._records), default=0)
            self._epoch = epoch
            self._append(EpochRecord(epoch, time.time_ns() // 1_000_000, self.owner))
            self._snapshot()
        except BaseException:
            self.close()
            raise
        return epoch

    def append(self, record: JournalRecord) -> None:
        self._refuse_appends_if_broken()
        if self._producer is None or self._epoch is None:
            msg = f"journal topic {self.topic!r} is not open for writing; call open() first"
            raise JournalError(msg)
        if record.epoch != self._epoch:
            msg = (
                f"record of epoch {record.epoch} cannot be appended to journal topic "
                f"{self.topic!r}, which this driver holds at epoch {self._epoch}; build records "
                "with the epoch returned by open()"
            )
            raise JournalError(msg)
        self._append(record)
        if isinstance(record, CheckpointRecord) or self._since_snapshot >= self.snapshot_every:
            self._snapshot()

    def read(self) -> list[JournalRecord]:
        return replay(record for _, record in self._read_from_last_snapshot())

    def close(self) -> None:
        producer, self._producer = self._producer, None
        if producer is not None:
            # Nothing is pending between appends; flush only bounds how long close can take.
            producer.flush(5.0)

    # --- writing ------------------------------------------------------------------------------

    def _append(self, record: JournalRecord) -> None:
        self._transact(encode_bytes(record))
        self._records.append(record)
        self._since_snapshot += 1

    def _snapshot(self) -> None:
        """Append the compacted journal so later reads can start here; tried again after
        `snapshot_every` more records if it has to be skipped."""
        if self._epoch is None:
            return
        kept = tuple(compact(self._records))
        value = encode_bytes(SnapshotRecord(self._epoch, kept))
        if len(value) > MAX_MESSAGE_BYTES - _BATCH_OVERHEAD_BYTES:
            # Skipping is safe (reads just start further back); producing would fail the producer.
            log.warning(
                "journal topic %s: a snapshot of %d records is %d bytes, over the %d-byte message "
                "limit; not written, so reads start at the previous snapshot",
                self.topic,
                len(kept),
                len(value),
                MAX_MESSAGE_BYTES,
            )
        else:
            self._transact(value)
        self._records = list(kept)
        self._since_snapshot = 0

    def _transact(self, value: bytes) -> None:
        """Append one message in its own transaction; durable once this returns."""
        self._refuse_appends_if_broken()
        deadline = time.monotonic() + self.timeout_s
        while True:
            try:
                self._producer.begin_transaction()
                self._producer.produce(
                    self.topic, value=value, key=self.app_id.encode(), partition=PARTITION
                )
            except KafkaException as exc:
                self._abort_or_raise(exc.args[0], deadline)
                continue
            if self._commit(deadline):
                return

    def _refuse_appends_if_broken(self) -> None:
        self._refuse_if_broken(f"journal topic {self.topic!r}", "append", "the producer's")

    def _commit(self, deadline: float) -> bool:
        """Commit the open transaction: True once durable, False if it was aborted (send again)."""
        while True:
            try:
                commit_transaction(self._producer, self._remaining(deadline), self.topic)
                return True
            except CommitTimedOut as timed_out:
                # The producer is finished (no KIP-890); whether the record landed is unknown.
                producer, self._producer = self._producer, None
                discard(producer)
                self._fail(timed_out.error, "the append's commit timed out")
            except KafkaException as exc:
                error = exc.args[0]
                if error.txn_requires_abort() or not error.retriable():
                    self._abort_or_raise(error, deadline)
                    return False
                self._raise_if_final(error, deadline)
                # Retriable: calling commit_transaction again resumes the commit in flight.
                time.sleep(0.05)

    def _abort_or_raise(self, error: Any, deadline: float) -> None:
        """Abort the failed attempt so it can be sent again, unless it cannot or must not be."""
        self._raise_if_final(error, deadline)
        if not error.txn_requires_abort():
            self._fail(
                error, "the producer reported an error that is neither retriable nor abortable"
            )
        try:
            # Nothing of the aborted attempt becomes visible to read_committed readers.
            self._producer.abort_transaction(self._remaining(deadline))
        except KafkaException as exc:
            self._raise_if_final(exc.args[0], deadline)
            self._fail(exc.args[0], "could not abort a failed append")
        time.sleep(0.05)

    def _raise_if_final(self, error: Any, deadline: float) -> None:
        """Fencing, fatal errors and the deadline end the append (librdkafka's error contract)."""
        if is_fenced(error):
            raise self._fenced(error)
        if error.fatal():
            self._fail(error, "the transactional producer failed fatally")
        if time.monotonic() >= deadline:
            self._fail(
                error,
                f"no append committed within {self.timeout_s:.0f}s; check that at least "
                f"min.insync.replicas={self.min_insync_replicas} brokers are up",
            )

    def _fail(self, error: Any, what: str) -> NoReturn:
        self._broken = f"{error.name()}: {error.str()}"
        msg = (
            f"journal topic {self.topic!r}: {what} ({self._broken}); the last append may not be "
            "journaled. Restart the driver; it recovers from the journal."
        )
        raise JournalError(msg)

    def _fenced(self, error: Any) -> FencedOut:
        msg = (
            f"journal topic {self.topic!r}: this driver (epoch {self._epoch}) was fenced by a "
            f"newer driver of app {self.app_id!r} that shares transactional.id "
            f"{transactional_id(self.app_id)!r} ({error.name()}); this driver must stop now. "
            "If that was not intended, make sure only one driver runs per app id."
        )
        return FencedOut(msg)

    def _remaining(self, deadline: float) -> float:
        return max(0.1, deadline - time.monotonic())

    def _fencing_producer(self) -> Any:
        """A transactional producer that has fenced every earlier holder of the journal."""
        producer = new_transactional_producer(
            self.conf,
            transactional_id(self.app_id),
            TRANSACTION_TIMEOUT_MS,
            settings={"message.max.bytes": MAX_MESSAGE_BYTES, "linger.ms": 0},
        )
        try:
            producer.init_transactions(self.timeout_s)
        except KafkaException as exc:
            error = exc.args[0]
            msg = (
                f"journal topic {self.topic!r}: could not take transactional.id "
                f"{transactional_id(self.app_id)!r} ({error.name()}: {error.str()}); expected "
                "the brokers to answer within "
                f"{self.timeout_s:.0f}s. Check bootstrap.servers and that the transaction log "
                "topic has enough in-sync replicas."
            )
            raise JournalError(msg) from exc
        return producer

    # --- reading ------------------------------------------------------------------------------

    def _read_from_last_snapshot(self) -> list[tuple[int, AnyRecord]]:
        """The records from the newest snapshot (inclusive) to the end, with their offsets."""
        tail = self._tail()
        try:
            low, high = self._end_offsets(tail)
            return self._scan_backwards(tail, low, high)
        finally:
            tail.close()

    def _end_offsets(self, tail: CommittedTail) -> tuple[int, int]:
        """The journal partition's `(low, high)`, `(0, 0)` while the topic does not exist (a
        first start); failovers are waited out until `timeout_s`."""

        def give_up(error: KafkaError) -> bool:
            return is_fatal(error) or self._missing(tail)

        try:
            return tail.end_offsets(self.topic, PARTITION, self.timeout_s, give_up)
        except KafkaException as exc:
            if self._missing(tail):
                return 0, 0
            msg = (
                f"cannot read the end offsets of journal topic {self.topic!r}: "
                f"{exc.args[0].str()}; expected the topic to exist and its leader to "
                "answer. Check the topic name and the brokers."
            )
            raise JournalError(msg) from exc

    def _missing(self, tail: CommittedTail) -> bool:
        """Whether the topic surely does not exist (False when the brokers do not answer)."""
        try:
            return not describe_topic(tail.consumer, self.topic, TRY_TIMEOUT_S).exists
        except KafkaException:
            return False

    def _scan_backwards(
        self, tail: CommittedTail, low: int, high: int
    ) -> list[tuple[int, AnyRecord]]:
        # Each append costs 2 offsets (record + commit marker) and a snapshot is due every
        # `snapshot_every` appends, so the first window nearly always holds one.
        records = tail.read_back(
            self.topic,
            {PARTITION: (low, high)},
            window=4 * self.snapshot_every + 64,
            growth=4,
            decode=lambda message: (message.offset(), _decode(self.topic, message)),
            enough=_has_snapshot,
            timeout_s=self.timeout_s,
            give_up=lambda error: True,  # any error event ends a journal read
        )[PARTITION]
        snapshots = [i for i, (_, r) in enumerate(records) if isinstance(r, SnapshotRecord)]
        if snapshots:
            return records[snapshots[-1] :]
        if low > 0:
            msg = (
                f"journal topic {self.topic!r} starts at offset {low}: older records were "
                "deleted (retention) and no snapshot follows, so the journal is incomplete. "
                "Restore the topic, or start the job with a new journal and explicit "
                "starting offsets."
            )
            raise JournalError(msg)
        return records

    # --- the topic ----------------------------------------------------------------------------

    def prepare_topic(self) -> None:
        """Create the topic if missing and wait until it has a leader; refuse a wrong one.

        Public for the driver election (`service.driver.election`), whose group subscribes to
        this topic before any driver has opened the journal."""
        config = {
            "cleanup.policy": "delete",
            "retention.ms": "-1",
            "retention.bytes": "-1",
            "min.insync.replicas": str(self.min_insync_replicas),
            "max.message.bytes": str(MAX_MESSAGE_BYTES),
        }
        # One partition, since only one partition keeps the records in order. Compaction or a
        # finite retention on an existing topic could delete what recovery still reads: refused.
        kept = ("cleanup.policy", "retention.ms", "retention.bytes")
        spec = TopicSpec(self.topic, 1, self.replication_factor, config, kept)
        ensure_topic(new_admin_client(self.conf), spec, JOURNAL_TOPIC, "refuse", self.timeout_s)

    def _tail(self) -> CommittedTail:
        # Never used to commit: the reader assigns the partition and seeks itself.
        group = f"dstreams-journal-reader-{self.app_id}-{uuid.uuid4().hex[:8]}"
        return CommittedTail(self.conf, group, JOURNAL_TOPIC)


def _has_snapshot(records: Sequence[tuple[int, AnyRecord]]) -> bool:
    return any(isinstance(record, SnapshotRecord) for _, record in records)


def _decode(topic: str, message: Any) -> AnyRecord:
    try:
        return decode_bytes(message.value() or b"")
    except JournalError as exc:
        msg = f"journal topic {topic!r}, record at offset {message.offset()}: {exc}"
        raise type(exc)(msg) from exc
