"""Executor-side reader: fetch exactly the records of one `OffsetRange` from Kafka.

Runs inside Spark's Python workers and never imports pyspark. Each worker process keeps one
confluent-kafka `Consumer` per connection config and re-assigns it for every range, so a batch
pays no connection set-up. Records are decoded here. What happens to a record that fails to
decode, and to offsets that retention deleted, is the caller's `ReadPolicy`: by default a failure
becomes a `SourceRecord` carrying the raw bytes and the reason (for the dead-letter path or to be
counted and skipped); with `fail_on_decode_error` it fails the read naming its offset.

The range `[from, until)` is complete when the consumer's position reaches `until`, not after
`count` records: transaction markers and aborted records are skipped by the client and compacted
topics have holes, so offsets jump and a range may hold fewer records than offsets.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

from connectors.codecs import Codec, DecodeError, resolve_codec
from connectors.offsets import OffsetRange
from connectors.process_cache import ConfKey, ProcessCache, conf_key
from service.errors import DataLoss, DStreamsError

logger = logging.getLogger(__name__)

# Forced because correctness depends on them: only committed data, never move the group's
# offsets, an offset that is gone is an error (never a silent jump), and EOF events tell us
# where the partition ends when a range finishes with a gap.
_FORCED: dict[str, Any] = {
    "isolation.level": "read_committed",
    "enable.auto.commit": False,
    "enable.auto.offset.store": False,
    "auto.offset.reset": "error",
    "enable.partition.eof": True,
}
# Defaults a job may override, both measured here:
# - fetch.queue.backoff.ms: librdkafka's default (1000) held a consumer to ~190k records/s,
#   10 ms gave ~760k (docs/architecture.md, Performance notes).
# - fetch.wait.max.ms: a fetch that reaches the log end waits this long on the broker, and the
#   next range's first fetch cannot start until it returns. At the default (500) every range
#   read after one that reached the end took 0.5 s longer; at 10 ms, 0.01 s, and reading four
#   50-record ranges one after the other took 55-74 ms; at 1 ms, 16-27 ms (most of a small
#   batch's read task). Polling the broker every millisecond is only done while a range waits
#   at the log end, as the consumer is unassigned between ranges.
# - queued.min.messages: librdkafka prefetches until this many messages wait per partition
#   (default 100,000), and whatever it fetched past `until` is dropped at `unassign`. Reading
#   sixteen 62,500-record ranges of a full topic fetched 1.85-1.97 M records at the default and
#   1.09 M at 10,000 (two `CONSUME_BATCH`es), with a third less CPU in this process and less in the
#   broker; the reader never waited longer for data. With brokers far away (tens of ms per
#   fetch), a job may raise it so that a round trip stays hidden behind the records queued.
# confluent-kafka refuses a Consumer without group.id; this one never joins the group or
# commits, so a placeholder does.
_DEFAULTS: dict[str, Any] = {
    "group.id": "dstreams-reader",
    "fetch.queue.backoff.ms": 10,
    "fetch.wait.max.ms": 1,
    "queued.min.messages": 10_000,
}

# Messages taken from the client per call: large enough to amortise the call, small enough that
# a record batch in Python stays a few MB.
CONSUME_BATCH = 5_000
# How long one consume() call may block; short so the stall check below runs regularly.
POLL_TIMEOUT_S = 0.5
# A range that makes no progress for this long fails its task (Spark retries it). It must stay
# above a leader fail-over (~10-30 s with default session timeouts) and below the job's patience.
STALL_TIMEOUT_S = 120.0
# Decode failures logged one by one per range; the rest are summarised in one line.
_LOGGED_DECODE_FAILURES = 10
# Asking where a partition now starts, after retention deleted offsets a range needs; well under
# the stall timeout, so a slow answer fails the task instead of hanging it.
_WATERMARK_TIMEOUT_S = 10.0


class SourceRecord(NamedTuple):
    """One Kafka record. When decoding failed, `value` is None, `error` says why and `raw`
    keeps the undecoded bytes for the dead-letter topic; otherwise `error` and `raw` are None."""

    topic: str
    partition: int
    offset: int
    timestamp_ms: int | None
    key: bytes | None
    value: Any
    error: str | None = None
    raw: bytes | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


class ReadStalled(DStreamsError):
    """A range could not be read to its end within the stall timeout."""


class UndecodableRecord(DStreamsError):
    """A record could not be decoded and the source has nowhere to put it (no dead letters)."""


LostOffsets = Callable[[OffsetRange], None]
"""Told of each run of offsets `[from, until)` a read skipped because retention deleted them."""

RecordTimestamps = Callable[[OffsetRange, int, int], None]
"""Told of a range's (earliest, latest) record timestamps in ms, for end-to-end latency."""


@dataclass(frozen=True)
class ReadPolicy:
    """What a read does with records it cannot hand on (see `docs/architecture.md`)."""

    fail_on_decode_error: bool = False
    """Raise `UndecodableRecord` naming the record instead of handing on a failed record."""
    fail_on_data_loss: bool = True
    """Raise `DataLoss` when offsets of the range are gone; else skip them and report them."""
    on_lost: LostOffsets | None = None
    """Told of every skipped run of offsets (only with `fail_on_data_loss` off)."""
    on_timestamps: RecordTimestamps | None = None
    """Told, once a range is read, of the earliest and latest record timestamps (ms) it saw."""


DEFAULT_POLICY = ReadPolicy()


# --- the consumer cache ------------------------------------------------------------------------


def _new_consumer(conf: Mapping[str, Any]) -> Any:
    from connectors.kafka_client import new_consumer

    return new_consumer(conf, defaults=_DEFAULTS, settings=_FORCED)


# One Consumer per connection config in this process; Spark runs one task at a time per Python
# worker, so a consumer is never used by two reads at once.
_CACHE: ProcessCache[ConfKey, Any] = ProcessCache(close=lambda consumer: consumer.close())


def close_consumers() -> None:
    """Close every cached consumer of this process (tests, worker shutdown)."""
    _CACHE.close_all()


def cached_consumer_count() -> int:
    return len(_CACHE)


def warm_consumer(conf: Mapping[str, Any], timeout_s: float = 10.0) -> None:
    """Create this process's cached consumer for `conf` and connect it to the cluster, so the
    first read after a warm standby's take-over finds it ready."""
    consumer = _CACHE.get(conf_key(conf), lambda: _new_consumer(conf))
    consumer.list_topics(timeout=timeout_s)


# --- reading -----------------------------------------------------------------------------------


def read_ranges(
    conf: Mapping[str, Any],
    ranges: Iterable[OffsetRange],
    codec_name: str | Codec,
    policy: ReadPolicy = DEFAULT_POLICY,
) -> Iterator[SourceRecord]:
    """The records of several ranges in order: one Spark partition's worth."""
    for r in ranges:
        yield from read_range(conf, r, codec_name, policy=policy)


def read_range(
    conf: Mapping[str, Any],
    r: OffsetRange,
    codec_name: str | Codec,
    *,
    stall_timeout_s: float = STALL_TIMEOUT_S,
    values_only: bool = False,
    policy: ReadPolicy = DEFAULT_POLICY,
) -> Iterator[Any]:
    """Exactly the records of `[from, until)` that a read_committed consumer sees, in order.

    With `values_only`, good records come as their decoded values and only failures as
    `SourceRecord`s (the fast path when nothing downstream needs offsets or keys). `policy` says
    what becomes of undecodable records and of offsets that retention deleted.
    """
    codec = resolve_codec(codec_name)
    if r.count == 0:
        return
    if getattr(codec, "key_codec", None) is not None:
        values_only = False  # decoded keys travel in whole records
    key = conf_key(conf)
    consumer = _CACHE.get(key, lambda: _new_consumer(conf))
    progress = _Progress(r, stall_timeout_s, policy)
    try:
        yield from _fetch(consumer, progress, codec, values_only)
    except Exception:
        # After an error the consumer's state is unknown; the retried task gets a fresh one.
        _CACHE.evict(key)
        raise


class _Progress:
    """The next offset the range still needs, and the stall deadline that progress pushes back."""

    def __init__(self, r: OffsetRange, stall_timeout_s: float, policy: ReadPolicy) -> None:
        self.range = r
        self.policy = policy
        self.next_offset = r.from_offset
        self.end_seen: int | None = None  # where the partition ended at the last EOF event
        self.decode_failures = 0
        self.offsets_gone = False  # retention deleted next_offset; skip ahead (policy allows)
        self.earliest: int | None = None  # record timestamps (ms) seen, for latency metrics
        self.latest: int | None = None
        self._timeout_s = stall_timeout_s
        self._deadline = time.monotonic() + stall_timeout_s

    @property
    def done(self) -> bool:
        return self.next_offset >= self.range.until_offset

    def note_timestamps(self, messages: list[Any]) -> None:
        """Keeps the earliest and latest timestamp of a fetch's first and last message: two
        calls per fetch rather than one per record (exact when timestamps grow with offsets)."""
        if self.policy.on_timestamps is None:
            return
        for message in (messages[0], messages[-1]):
            kind, stamp = message.timestamp()
            if kind and message.error() is None:  # kind 0: TIMESTAMP_NOT_AVAILABLE
                self.earliest = stamp if self.earliest is None else min(self.earliest, stamp)
                self.latest = stamp if self.latest is None else max(self.latest, stamp)

    def report_timestamps(self) -> None:
        on_timestamps = self.policy.on_timestamps
        if on_timestamps is not None and self.earliest is not None and self.latest is not None:
            on_timestamps(self.range, self.earliest, self.latest)

    def advance(self, offset: int) -> None:
        """The consumer is past every offset below `offset`."""
        if offset > self.next_offset:
            self.next_offset = offset
            self._deadline = time.monotonic() + self._timeout_s

    def check_stall(self) -> None:
        if time.monotonic() < self._deadline:
            return
        r = self.range
        msg = (
            f"reading {r.topic}-{r.partition} offsets [{r.from_offset}, {r.until_offset}) made "
            f"no progress for {self._timeout_s:.0f} s at offset {self.next_offset} (partition end "
            f"last seen at {self.end_seen}); expected the broker to serve offsets up to "
            f"{r.until_offset - 1}. Check broker health and whether the topic was truncated; "
            "the task will be retried"
        )
        raise ReadStalled(msg)


def _fetch(consumer: Any, progress: _Progress, codec: Codec, values_only: bool) -> Iterator[Any]:
    r = progress.range
    key_codec: Codec | None = getattr(codec, "key_codec", None)
    _assign(consumer, r, r.from_offset)
    while not progress.done:
        messages = _next_messages(consumer, progress)
        if messages:
            progress.note_timestamps(messages)
        records = _decode_batch(messages, progress, codec, values_only)
        if key_codec is not None:
            records = _decode_keys(records, messages, progress, key_codec)
        yield from records
        if progress.offsets_gone:
            _skip_deleted(consumer, progress)
        elif not progress.done:
            # Nothing (more) to hand out: control records or compacted holes may still have
            # moved the position up to `until`.
            progress.advance(_position(consumer, r))
            progress.check_stall()
    # Stop fetching: an idle cached consumer should not poll the broker between tasks.
    consumer.unassign()
    progress.report_timestamps()
    if progress.decode_failures > _LOGGED_DECODE_FAILURES:
        logger.warning(
            "%d records of %s-%d [%d, %d) could not be decoded (first %d logged above)",
            progress.decode_failures,
            r.topic,
            r.partition,
            r.from_offset,
            r.until_offset,
            _LOGGED_DECODE_FAILURES,
        )


def _assign(consumer: Any, r: OffsetRange, offset: int) -> None:
    from confluent_kafka import TopicPartition

    consumer.assign([TopicPartition(r.topic, r.partition, offset)])


def _skip_deleted(consumer: Any, progress: _Progress) -> None:
    """Retention deleted the offsets from `next_offset` on: go on from the partition's first
    stored offset (or the range's end), and report what was skipped as lost."""
    from confluent_kafka import TopicPartition

    r = progress.range
    first_stored, _ = consumer.get_watermark_offsets(
        TopicPartition(r.topic, r.partition), timeout=_WATERMARK_TIMEOUT_S, cached=False
    )
    resume = min(max(int(first_stored), progress.next_offset), r.until_offset)
    lost = OffsetRange(r.topic, r.partition, progress.next_offset, resume)
    logger.warning(
        "offsets [%d, %d) of %s-%d were deleted by retention before this batch read them; "
        "skipping them because fail_on_data_loss is off",
        lost.from_offset,
        lost.until_offset,
        r.topic,
        r.partition,
    )
    if progress.policy.on_lost is not None and lost.count:
        progress.policy.on_lost(lost)
    progress.offsets_gone = False
    progress.advance(resume)
    if not progress.done:
        _assign(consumer, r, resume)


def _next_messages(consumer: Any, progress: _Progress) -> list[Any]:
    """What the client has queued (up to what the range still needs), else the first message
    or event to arrive within the poll timeout.

    consume(n, timeout) waits until it has n messages or the timeout passes, so asking for
    many with a timeout would wait out the whole timeout whenever the range ends in a gap.
    """
    wanted = min(CONSUME_BATCH, progress.range.until_offset - progress.next_offset)
    messages: list[Any] = consumer.consume(num_messages=wanted, timeout=0)
    if not messages:
        messages = consumer.consume(num_messages=1, timeout=POLL_TIMEOUT_S)
    return messages


def _decode_batch(
    messages: list[Any], progress: _Progress, codec: Codec, values_only: bool = False
) -> list[Any]:
    """The records of one consume() call that belong to the range, in order.

    The source's hot loop: local variables and tuples built in place (twice as fast as a helper
    per record). With `values_only` a good record is just its value; failures stay
    `SourceRecord`s so they can still become dead letters."""
    r = progress.range
    topic, partition, until = r.topic, r.partition, r.until_offset
    next_offset = progress.next_offset
    records: list[Any] = []
    for message in messages:
        if message.error() is not None:
            next_offset = _after_event(message, progress, next_offset)
            continue
        offset = message.offset()
        if offset >= until:  # the first record after a gap that spans `until`
            next_offset = until
            break
        if offset < next_offset:  # never hand out a record twice
            continue
        try:
            value = codec(message.value())
        except DecodeError as exc:
            records.append(_undecodable(message, offset, progress, exc.reason))
        else:
            if values_only:
                records.append(value)
            else:
                kind, timestamp = message.timestamp()
                # kind 0 is TIMESTAMP_NOT_AVAILABLE; error and raw stay None for a good record.
                stamp = timestamp if kind else None
                fields = (topic, partition, offset, stamp, message.key(), value, None, None)
                records.append(_new_record(SourceRecord, fields))
        next_offset = offset + 1
        if next_offset >= until:
            break
    progress.advance(next_offset)
    return records


def _decode_keys(
    records: list[Any], messages: list[Any], progress: _Progress, key_codec: Codec
) -> list[Any]:
    """Good records with their keys decoded; a key that fails makes its record fail (outside the
    hot loop: only sources that decode keys pay for it)."""
    by_offset = {m.offset(): m for m in messages if m.error() is None}
    decoded: list[Any] = []
    for record in records:
        if record.error is None:
            try:
                record = record._replace(key=key_codec(record.key))
            except DecodeError as exc:
                message = by_offset[record.offset]
                record = _undecodable(message, record.offset, progress, f"key: {exc.reason}")
        decoded.append(record)
    return decoded


def _after_event(message: Any, progress: _Progress, next_offset: int) -> int:
    """Handles an error or EOF event met at `next_offset`; where reading goes on from."""
    progress.advance(next_offset)
    _on_event(message, progress)
    return progress.next_offset


# NamedTuple's generated __new__ is a Python function handling defaults; building the tuple
# directly skips it in the hot loop.
_new_record = tuple.__new__


def _undecodable(message: Any, offset: int, progress: _Progress, reason: str) -> SourceRecord:
    r = progress.range
    if progress.policy.fail_on_decode_error:
        msg = (
            f"cannot decode the record at {r.topic}-{r.partition} offset {offset}: {reason}. "
            "Expected every record to decode because no dead_letter.topic is set; set one to "
            "keep such records aside, or set this source's on_decode_error: skip to count and "
            "skip them"
        )
        raise UndecodableRecord(msg)
    progress.decode_failures += 1
    if progress.decode_failures <= _LOGGED_DECODE_FAILURES:
        logger.warning("cannot decode %s-%d offset %d: %s", r.topic, r.partition, offset, reason)
    kind, timestamp = message.timestamp()
    timestamp_ms = timestamp if kind else None
    key, raw = message.key(), message.value()
    return SourceRecord(r.topic, r.partition, offset, timestamp_ms, key, None, reason, raw)


def _on_event(message: Any, progress: _Progress) -> None:
    """An error or EOF event from the consumer: note where the partition ends, or fail."""
    from confluent_kafka import KafkaException

    from connectors.kafka_client import AUTO_OFFSET_RESET, PARTITION_EOF, is_retriable

    error = message.error()
    code = error.code()
    r = progress.range
    if code == PARTITION_EOF:
        progress.end_seen = message.offset()
        progress.advance(message.offset())
        return
    if code == AUTO_OFFSET_RESET:
        if not progress.policy.fail_on_data_loss:
            progress.offsets_gone = True
            return
        msg = (
            f"offsets of {r.topic}-{r.partition} from {progress.next_offset} (range "
            f"[{r.from_offset}, {r.until_offset})) are no longer stored: retention deleted "
            f"them after the batch was planned ({error.str()}). Raise the topic's retention "
            "or the job's rate; these records cannot be recovered. To go on without them, set "
            "the source's fail_on_data_loss: false (the skipped offsets are journaled)"
        )
        raise DataLoss(msg)
    if not is_retriable(error):
        raise KafkaException(error)
    # Transient (a broker restarting, a leader moving): the client retries by itself, and the
    # stall deadline bounds how long we let it.
    logger.info("reading %s-%d: transient Kafka error, retrying: %s", r.topic, r.partition, error)


def _position(consumer: Any, r: OffsetRange) -> int:
    from confluent_kafka import TopicPartition

    (position,) = consumer.position([TopicPartition(r.topic, r.partition)])
    return int(position.offset)  # negative (OFFSET_INVALID) before anything was consumed
