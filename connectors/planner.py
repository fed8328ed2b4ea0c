"""Driver-side planning of the Kafka offset ranges a batch covers.

This is step 1 of docs/architecture.md, "The batch lifecycle".

For every source partition: `from` is the previous batch's `until` (or the starting-offsets policy
the first time a partition is seen), `until` is the smaller of the last stable offset and `from`
plus the rate budget. The broker is only read through the small `KafkaMetadata` protocol, so the
arithmetic here is tested with a fake; `ConfluentMetadata` is the real implementation.

Batches of a driver's down time (docs/architecture.md, Recovery) are planned one after another
as fast as they run. A plan that read every partition up to its end at wall-clock time `w`
proves that nothing else had arrived by `w`, so the batches up to `w` that follow it read
nothing: given the wall clock batch times follow (`OffsetPlanner.clock_ms`), the planner plans
them empty without asking the brokers again.

Empty ranges: `plan()` returns one range per known partition, *including* empty ones
(`from == until`), so that a journaled batch always holds the full position of every partition
(recovery needs nothing else, and contiguity checks compare batch to batch per partition).
`split_ranges()` drops the empty ones, so an idle partition costs no Spark task and an idle batch
has no Spark partitions at all.
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Literal, Protocol

from connectors.offsets import OffsetRange
from service.errors import ConfigError, DataLoss

logger = logging.getLogger(__name__)
# A watermark request normally takes milliseconds. One sent to a leader that has just died waits
# out its whole timeout, and the planner would hold up the batch for it; a partition that does not
# answer in time is skipped for one batch (nothing is lost: the next batch takes its records).
WATERMARK_TIMEOUT_S = 2.0

TopicPartition = tuple[str, int]
"""`(topic, partition)`: the key of all per-partition state here."""

Watermarks = tuple[int, int]
"""`(earliest, last_stable)`: the first offset still stored and the read_committed end offset."""


class KafkaMetadata(Protocol):
    """What the planner needs to know about the cluster. All answers are for read_committed."""

    def partitions_of(self, topics: Sequence[str]) -> list[TopicPartition]:
        """Partitions of the named topics; a topic that does not exist (yet) has none."""
        ...

    def partitions_matching(self, pattern: re.Pattern[str]) -> list[TopicPartition]:
        """Partitions of every non-internal topic whose whole name matches `pattern`."""
        ...

    def watermarks(self, partitions: Sequence[TopicPartition]) -> dict[TopicPartition, Watermarks]:
        """`(earliest, last stable offset)` per partition; partitions that cannot be read right
        now (no leader, timeout) are left out of the answer and are asked again next batch."""
        ...

    def offsets_for_timestamp(
        self, partitions: Sequence[TopicPartition], timestamp_ms: int
    ) -> dict[TopicPartition, int | None]:
        """First offset whose timestamp is >= `timestamp_ms`; `None` where every record is older."""
        ...

    def committed_offsets(
        self, partitions: Sequence[TopicPartition]
    ) -> dict[TopicPartition, int | None]:
        """The consumer group's committed offsets; `None` where the group has committed none."""
        ...


# --- starting offsets --------------------------------------------------------------------------

Policy = Literal["earliest", "latest", "committed", "timestamp", "explicit"]
Fallback = Literal["earliest", "latest"]
_POLICIES: tuple[Policy, ...] = ("earliest", "latest", "committed", "timestamp", "explicit")


@dataclass(frozen=True)
class StartingOffsets:
    """Where a partition seen on the first batch starts. Build with the class methods.

    `fallback` applies to `committed` (partitions the group never committed) and to `explicit`
    (partitions the mapping does not name). `timestamp` starts partitions whose records are all
    older than the timestamp at their end, as Kafka's `offsetsForTimes` does.
    """

    policy: Policy
    timestamp_ms: int = -1
    offsets: Mapping[TopicPartition, int] = field(default_factory=dict)
    fallback: Fallback = "earliest"

    def __post_init__(self) -> None:
        if self.policy not in _POLICIES:
            msg = f"starting offsets policy {self.policy!r} is unknown; expected one of {_POLICIES}"
            raise ConfigError(msg)
        if self.policy == "timestamp" and self.timestamp_ms < 0:
            msg = f"starting offsets by timestamp need timestamp_ms >= 0, got {self.timestamp_ms}"
            raise ConfigError(msg)
        bad = {tp: off for tp, off in self.offsets.items() if off < 0}
        if bad:
            msg = f"explicit starting offsets must be >= 0, got {bad}"
            raise ConfigError(msg)
        if self.fallback not in ("earliest", "latest"):
            msg = f"starting offsets fallback must be 'earliest' or 'latest', got {self.fallback!r}"
            raise ConfigError(msg)

    @classmethod
    def earliest(cls) -> StartingOffsets:
        return cls("earliest")

    @classmethod
    def latest(cls) -> StartingOffsets:
        return cls("latest")

    @classmethod
    def committed(cls, fallback: Fallback = "earliest") -> StartingOffsets:
        return cls("committed", fallback=fallback)

    @classmethod
    def at_timestamp(cls, timestamp_ms: int) -> StartingOffsets:
        return cls("timestamp", timestamp_ms=timestamp_ms)

    @classmethod
    def explicit(
        cls, offsets: Mapping[TopicPartition, int], fallback: Fallback = "earliest"
    ) -> StartingOffsets:
        return cls("explicit", offsets=dict(offsets), fallback=fallback)


# --- the planner -------------------------------------------------------------------------------


class OffsetPlanner:
    """Plans each batch's `OffsetRange`s and remembers where every partition stands.

    State is only the next `from` offset per partition (`positions()`); the driver journals the
    planned ranges and, after a restart, hands the last `until`s back with `resume()`. A plan
    that raises leaves the state unchanged, so retrying the same batch plans the same ranges.
    """

    def __init__(
        self,
        metadata: KafkaMetadata,
        *,
        topics: Sequence[str] | None = None,
        pattern: str | re.Pattern[str] | None = None,
        starting: StartingOffsets,
        max_rate_per_partition: float | None = None,
        fail_on_data_loss: bool = True,
    ) -> None:
        if (topics is None) == (pattern is None):
            msg = "the Kafka source needs exactly one of `topics` (a list) or `pattern` (a regex)"
            raise ConfigError(msg)
        if isinstance(topics, str):
            msg = f"`topics` must be a list of names, got the string {topics!r}; use [{topics!r}]"
            raise ConfigError(msg)
        _check_rate("max_rate_per_partition", max_rate_per_partition)
        self._metadata = metadata
        self._subscription = _subscription(topics, pattern)
        self._starting = starting
        self._max_rate = max_rate_per_partition
        self._fail_on_data_loss = fail_on_data_loss
        self._next: dict[TopicPartition, int] = {}
        # The starting policy applies to the partitions of the first plan only; anything seen
        # later appeared while running and is read from its beginning.
        self._started = False
        # Partitions present at the first plan whose offsets could not be read yet: they still
        # get the starting policy once readable, as if they had been read on time.
        self._policy_pending: set[TopicPartition] = set()
        self._lost: dict[TopicPartition, int] = {}
        self.clock_ms: Callable[[], int] | None = None
        """The wall clock batch times follow, set by a driver whose scheduler follows it (None:
        batch times are made up, as in tests, and every plan asks the brokers)."""
        # When the last plan read every partition to its end: the time it asked at and its
        # partitions; batches up to that time read nothing more (see the module's doc).
        self._drained: tuple[int, list[TopicPartition]] | None = None

    # -- state the driver reads and restores

    def positions(self) -> dict[TopicPartition, int]:
        """The next `from` offset of every partition planned so far."""
        return dict(self._next)

    def resume(self, positions: Mapping[TopicPartition, int]) -> None:
        """Continue from journaled positions (the last planned `until` per partition).

        Replaces the state. Partitions not named are treated as having appeared while the
        service was down, so they start at their earliest offset, not at the starting policy.
        """
        bad = {tp: off for tp, off in positions.items() if off < 0}
        if bad:
            msg = f"resume positions must be >= 0, got {bad}; the journal looks corrupt"
            raise ValueError(msg)
        self._next = dict(positions)
        self._started = True
        self._policy_pending.clear()
        self._drained = None

    @property
    def fail_on_data_loss(self) -> bool:
        """Whether deleted offsets stop the job (else they are skipped and counted)."""
        return self._fail_on_data_loss

    @property
    def lost_offsets_total(self) -> int:
        """Offsets skipped because retention deleted them (only with fail_on_data_loss=False)."""
        return sum(self._lost.values())

    def lost_offsets(self) -> dict[TopicPartition, int]:
        """`lost_offsets_total` per partition, for a labelled metric."""
        return dict(self._lost)

    # -- planning

    def plan(
        self, batch_time_ms: int, interval_ms: int, rate: float | None = None
    ) -> list[OffsetRange]:
        """The ranges of batch `batch_time_ms`, sorted by topic and partition, empty ones kept.

        `rate` (records/s per partition, e.g. from backpressure) is capped by
        `max_rate_per_partition`; `None` means the configured maximum alone. A batch no later
        than the last plan that read everything to the end is planned empty from memory.
        """
        if interval_ms <= 0:
            msg = f"batch interval must be > 0 ms, got {interval_ms}"
            raise ValueError(msg)
        _check_rate("rate", rate)
        if self._drained is not None and batch_time_ms <= self._drained[0]:
            return [
                OffsetRange(t, p, self._next[t, p], self._next[t, p]) for t, p in self._drained[1]
            ]
        asked_at = self.clock_ms() if self.clock_ms is not None else None
        budget = _budget(_effective_rate(self._max_rate, rate), interval_ms)
        partitions = self._discover()
        marks = self._metadata.watermarks(partitions)
        new = [tp for tp in partitions if tp not in self._next]
        if not self._started:
            self._policy_pending.update(new)
        starts = self._starting_positions(new, marks)
        lost: dict[TopicPartition, int] = {}
        ranges: list[OffsetRange] = []
        for tp in partitions:
            position = self._next.get(tp, starts.get(tp))
            if position is None:  # new partition whose offsets could not be read: next batch
                continue
            if tp not in marks:  # known but unreadable right now: plan nothing, keep the place
                ranges.append(OffsetRange(tp[0], tp[1], position, position))
                continue
            position = self._check_position(tp, position, marks[tp], lost, batch_time_ms)
            ranges.append(_range(tp, position, marks[tp][1], budget))
        self._commit(ranges, lost)
        drained = asked_at is not None and _read_to_end(partitions, marks, ranges)
        self._drained = (asked_at, partitions) if drained and asked_at is not None else None
        return ranges

    def _commit(self, ranges: list[OffsetRange], lost: Mapping[TopicPartition, int]) -> None:
        for r in ranges:
            self._next[r.topic_partition] = r.until_offset
        for tp, count in lost.items():
            self._lost[tp] = self._lost.get(tp, 0) + count
        self._policy_pending.difference_update(self._next)
        self._started = True

    def _discover(self) -> list[TopicPartition]:
        if isinstance(self._subscription, re.Pattern):
            found = self._metadata.partitions_matching(self._subscription)
        else:
            found = self._metadata.partitions_of(self._subscription)
        partitions = sorted(set(found))
        if self._started:
            new = [tp for tp in partitions if tp not in self._next]
            new = [tp for tp in new if tp not in self._policy_pending]
            if new:
                logger.info("new Kafka partitions %s, reading them from their earliest offset", new)
        return partitions

    def _starting_positions(
        self, new: list[TopicPartition], marks: Mapping[TopicPartition, Watermarks]
    ) -> dict[TopicPartition, int]:
        readable = [tp for tp in new if tp in marks]
        by_policy = [tp for tp in readable if tp in self._policy_pending]
        positions = {tp: marks[tp][0] for tp in readable if tp not in self._policy_pending}
        if by_policy:
            positions.update(_apply_policy(self._starting, by_policy, marks, self._metadata))
        return positions

    def _check_position(
        self,
        tp: TopicPartition,
        position: int,
        marks: Watermarks,
        lost: dict[TopicPartition, int],
        batch_time_ms: int,
    ) -> int:
        """The position to read from, after checking it still exists in the partition."""
        earliest, stable = marks
        if position > stable:
            return self._beyond_end(tp, position, marks, batch_time_ms)
        if position < earliest:
            return self._deleted(tp, position, earliest, lost, batch_time_ms)
        return position

    def _deleted(
        self,
        tp: TopicPartition,
        position: int,
        earliest: int,
        lost: dict[TopicPartition, int],
        batch_time_ms: int,
    ) -> int:
        what = (
            f"offsets [{position}, {earliest}) of {tp[0]}-{tp[1]} were deleted by retention "
            f"before batch {batch_time_ms} could read them ({earliest - position} offsets)"
        )
        self._on_data_loss(
            what,
            stopping="Raise the topic's retention or the job's rate, "
            "or set fail_on_data_loss=false to skip them",
            going_on=f"skipping to {earliest} because fail_on_data_loss is off",
        )
        lost[tp] = earliest - position
        return earliest

    def _beyond_end(
        self, tp: TopicPartition, position: int, marks: Watermarks, batch_time_ms: int
    ) -> int:
        # The log's end moved below a position we already read up to (or were told to start
        # at): the topic was deleted and re-created, or the log was truncated by an unclean
        # leader election. What sits below our position now is new data we cannot place.
        earliest, stable = marks
        what = (
            f"{tp[0]}-{tp[1]} ends at offset {stable} (earliest {earliest}) but batch "
            f"{batch_time_ms} was to start at {position}: the topic was re-created or truncated"
        )
        self._on_data_loss(
            what,
            stopping="Check the topic, then restart with fail_on_data_loss=false "
            "to re-read this partition from its start",
            going_on=f"re-reading it from offset {earliest}",
        )
        return earliest

    def _on_data_loss(self, what: str, *, stopping: str, going_on: str) -> None:
        """Raises `DataLoss` saying `what` was lost and how to go on (`stopping`) when
        fail_on_data_loss is on; otherwise warns and lets the caller skip past it (`going_on`)."""
        if self._fail_on_data_loss:
            msg = f"{what}; stopping because fail_on_data_loss is on. {stopping}"
            raise DataLoss(msg)
        logger.warning("%s; %s", what, going_on)


def _subscription(
    topics: Sequence[str] | None, pattern: str | re.Pattern[str] | None
) -> list[str] | re.Pattern[str]:
    if pattern is not None:
        return re.compile(pattern) if isinstance(pattern, str) else pattern
    return sorted(set(topics or ()))


def _apply_policy(
    starting: StartingOffsets,
    partitions: list[TopicPartition],
    marks: Mapping[TopicPartition, Watermarks],
    metadata: KafkaMetadata,
) -> dict[TopicPartition, int]:
    """Starting positions of partitions present on the first batch."""

    def fallback(tp: TopicPartition) -> int:
        return marks[tp][0] if starting.fallback == "earliest" else marks[tp][1]

    if starting.policy == "earliest":
        return {tp: marks[tp][0] for tp in partitions}
    if starting.policy == "latest":
        return {tp: marks[tp][1] for tp in partitions}
    if starting.policy == "timestamp":
        found = metadata.offsets_for_timestamp(partitions, starting.timestamp_ms)
        return {tp: _or(found.get(tp), marks[tp][1]) for tp in partitions}
    if starting.policy == "committed":
        committed = metadata.committed_offsets(partitions)
        return {tp: _or(committed.get(tp), fallback(tp)) for tp in partitions}
    return {tp: _or(starting.offsets.get(tp), fallback(tp)) for tp in partitions}


def _or(value: int | None, default: int) -> int:
    return default if value is None else value


def _read_to_end(
    partitions: list[TopicPartition],
    marks: Mapping[TopicPartition, Watermarks],
    ranges: list[OffsetRange],
) -> bool:
    """Whether a plan reads every partition (all of them readable) up to its last stable offset."""
    planned = {r.topic_partition: r.until_offset for r in ranges}
    return all(tp in marks and planned.get(tp, -1) >= marks[tp][1] for tp in partitions)


def _range(tp: TopicPartition, position: int, stable: int, budget: int | None) -> OffsetRange:
    until = stable if budget is None else min(stable, position + budget)
    # A hanging transaction can hold the LSO below the earliest offset we skipped to.
    return OffsetRange(tp[0], tp[1], position, max(position, until))


# --- rate limits -------------------------------------------------------------------------------


def _check_rate(name: str, rate: float | None) -> None:
    if rate is not None and (math.isnan(rate) or rate < 0):
        msg = f"{name} must be a number of records/s >= 0 (or unset), got {rate}"
        raise ConfigError(msg)


def _effective_rate(maximum: float | None, override: float | None) -> float | None:
    if maximum is None:
        return override
    if override is None:
        return maximum
    return min(maximum, override)


def _budget(rate: float | None, interval_ms: int) -> int | None:
    """Most offsets one partition may advance in one batch; `None` for no limit.

    Computed from the decimal the user wrote (`repr`), so 3.3 records/s over 10 s is 33, not the
    32 that binary floating point would give. At least 1 when the rate is positive, so a low
    rate with a short interval still makes progress.
    """
    if rate is None or math.isinf(rate):
        return None
    if rate == 0:
        return 0
    return max(1, math.floor(Fraction(repr(rate)) * interval_ms / 1000))


# --- splitting into Spark partitions -----------------------------------------------------------


def split_ranges(ranges: Sequence[OffsetRange], min_partitions: int) -> list[OffsetRange]:
    """One Spark partition per non-empty range, large ranges split so there are at least
    `min_partitions` where the data allows.

    Each range gets `ceil(count * min_partitions / total)` pieces: the shares add up to at least
    `min_partitions`, and a range below its share (`count <= total / min_partitions`) stays
    whole. Empty ranges are dropped. The result is sorted, so it is the same on every replay.

    >>> ranges = [OffsetRange("t", 0, 0, 90), OffsetRange("t", 1, 5, 5), OffsetRange("t", 2, 0, 10)]
    >>> [(r.partition, r.from_offset, r.until_offset) for r in split_ranges(ranges, 4)]
    [(0, 0, 23), (0, 23, 46), (0, 46, 68), (0, 68, 90), (2, 0, 10)]
    >>> len(split_ranges(ranges, 2))  # two non-empty ranges already make two partitions
    2
    """
    non_empty = sorted(r for r in ranges if r.count > 0)
    total = sum(r.count for r in non_empty)
    if len(non_empty) >= min_partitions or total == 0:
        return non_empty
    pieces: list[OffsetRange] = []
    for r in non_empty:
        pieces.extend(r.split(-(-r.count * min_partitions // total)))
    return pieces


def partition_bounds_problem(min_partitions: int, max_partitions: int | None) -> str | None:
    """What is wrong with a source's `min_partitions`/`max_partitions` pair, if anything."""
    if max_partitions is not None and max_partitions < min_partitions:
        return (
            f"max_partitions ({max_partitions}) is below min_partitions ({min_partitions}); "
            "expected max_partitions >= min_partitions, or max_partitions unset"
        )
    return None


def pack_ranges(pieces: Sequence[OffsetRange], max_groups: int | None) -> list[list[OffsetRange]]:
    """`pieces` (as `split_ranges` returns them) in at most `max_groups` groups, one Spark
    partition each; none: one piece per group.

    On a few cores a task's fixed cost (scheduling, the Python worker's round trip: ~15 ms on 2
    cores) outweighs reading a small range, so a job of fewer, fuller tasks finishes sooner.
    Largest pieces first, each to the lightest group (the lowest index on a tie), then each
    group in offset order: the grouping depends on the pieces alone, so a replay of a batch
    reads the same records in the same partitions.

    >>> pieces = [OffsetRange("t", p, 0, n) for p, n in enumerate([50, 10, 30, 20])]
    >>> [[r.partition for r in g] for g in pack_ranges(pieces, 2)]
    [[0, 1], [2, 3]]
    >>> len(pack_ranges(pieces, None)), len(pack_ranges(pieces, 8))
    (4, 4)
    """
    if max_groups is None or len(pieces) <= max_groups:
        return [[piece] for piece in pieces]
    groups: list[list[OffsetRange]] = [[] for _ in range(max_groups)]
    totals = [0] * max_groups
    for piece in sorted(pieces, key=lambda r: (-r.count, r)):
        lightest = min(range(max_groups), key=lambda g: (totals[g], g))
        groups[lightest].append(piece)
        totals[lightest] += piece.count
    return [sorted(group) for group in groups]


# --- the confluent-kafka implementation of KafkaMetadata ---------------------------------------

# Forced because correctness depends on them: ranges must end at the LSO, and this consumer must
# never move the group's offsets (those are committed only after a batch completes).
_METADATA_FORCED = {"isolation.level": "read_committed", "enable.auto.commit": False}


class ConfluentMetadata:
    """`KafkaMetadata` over one confluent-kafka `Consumer` that never subscribes or fetches.

    With `isolation.level=read_committed`, librdkafka (since 1.8.0, confluentinc/librdkafka#3423)
    answers `query_watermark_offsets` and `offsets_for_times` with the last stable offset instead
    of the high watermark; tests/kafka/test_reader.py checks this against the broker.
    Watermarks are asked one partition at a time (two ListOffsets requests each, sent together):
    about a millisecond per partition on a local broker.
    """

    def __init__(
        self,
        conf: Mapping[str, Any],
        *,
        timeout_s: float = 10.0,
        watermark_timeout_s: float = WATERMARK_TIMEOUT_S,
    ) -> None:
        from connectors.kafka_client import new_consumer

        # confluent-kafka refuses a Consumer without group.id; without a configured group, a
        # placeholder is fine because this consumer never joins or commits.
        self._has_group = "group.id" in conf
        self._consumer: Any = new_consumer(
            conf, defaults={"group.id": "dstreams-metadata"}, settings=_METADATA_FORCED
        )
        self._timeout_s = timeout_s
        self._watermark_timeout_s = watermark_timeout_s
        self._last_topics: dict[str, Any] | None = None

    def close(self) -> None:
        self._consumer.close()

    def __enter__(self) -> ConfluentMetadata:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _topics(self) -> dict[str, Any]:
        from confluent_kafka import KafkaException

        from connectors.kafka_client import is_transient

        try:
            cluster = self._consumer.list_topics(timeout=self._timeout_s)
        except KafkaException as exc:
            # While a broker fails over, metadata can time out; the partitions seen last are
            # still right, and their offsets are asked (and may be skipped) one by one.
            if self._last_topics is None or not is_transient(exc.args[0]):
                raise
            logger.warning("Kafka metadata unavailable now (%s); using the last known", exc)
            return self._last_topics
        # A topic still being created answers with an error and no partitions; skip it now.
        self._last_topics = {name: t for name, t in cluster.topics.items() if t.error is None}
        return self._last_topics

    def partitions_of(self, topics: Sequence[str]) -> list[TopicPartition]:
        existing = self._topics()
        wanted = [existing[name] for name in topics if name in existing]
        return [(t.topic, p) for t in wanted for p in t.partitions]

    def partitions_matching(self, pattern: re.Pattern[str]) -> list[TopicPartition]:
        # Like Kafka's pattern subscription: whole-name match, internal topics excluded.
        return [
            (name, p)
            for name, t in self._topics().items()
            if not name.startswith("__") and pattern.fullmatch(name)
            for p in t.partitions
        ]

    def watermarks(self, partitions: Sequence[TopicPartition]) -> dict[TopicPartition, Watermarks]:
        answer: dict[TopicPartition, Watermarks] = {}
        for tp in partitions:
            marks = self._watermarks_of(tp)
            if marks is not None:
                answer[tp] = marks
        return answer

    def _watermarks_of(self, tp: TopicPartition) -> Watermarks | None:
        from confluent_kafka import KafkaException, TopicPartition

        from connectors.kafka_client import is_transient

        try:
            marks = self._consumer.get_watermark_offsets(
                TopicPartition(tp[0], tp[1]), timeout=self._watermark_timeout_s, cached=False
            )
        except KafkaException as exc:
            # Skipping a partition for one batch loses nothing: the next batch takes its records.
            if not is_transient(exc.args[0]):
                raise
            logger.warning("offsets of %s-%d unavailable now (%s); retrying next batch", *tp, exc)
            return None
        if marks is None:
            logger.warning("offsets of %s-%d timed out; retrying next batch", *tp)
            return None
        return int(marks[0]), int(marks[1])

    def offsets_for_timestamp(
        self, partitions: Sequence[TopicPartition], timestamp_ms: int
    ) -> dict[TopicPartition, int | None]:
        from confluent_kafka import TopicPartition

        query = [TopicPartition(t, p, timestamp_ms) for t, p in partitions]
        found = self._consumer.offsets_for_times(query, timeout=self._timeout_s)
        return {(r.topic, r.partition): _offset_or_none(r) for r in found}

    def committed_offsets(
        self, partitions: Sequence[TopicPartition]
    ) -> dict[TopicPartition, int | None]:
        from confluent_kafka import TopicPartition

        if not self._has_group:
            msg = (
                "starting offsets 'committed' need the consumer group: set group.id in the "
                "Kafka connection config"
            )
            raise ConfigError(msg)
        query = [TopicPartition(t, p) for t, p in partitions]
        found = self._consumer.committed(query, timeout=self._timeout_s)
        return {(r.topic, r.partition): _offset_or_none(r) for r in found}


def _offset_or_none(result: Any) -> int | None:
    """A per-partition answer's offset; negative means none (OFFSET_END / OFFSET_INVALID)."""
    if result.error is not None:
        from confluent_kafka import KafkaException

        raise KafkaException(result.error)
    offset = int(result.offset)
    return offset if offset >= 0 else None
