"""Input DStreams: what a batch reads is decided (planned) on the driver and journaled as data.

A source plans batch `t` before any work runs and returns its `SourcePlan`; it keeps no copy. The
lifecycle journals the plan and hands it back to `compute`, so a replayed batch, whose plan is
rebuilt from the journal with `plan_from_journal`, reads exactly what the first attempt read.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from functools import partial
from typing import Any, Protocol

from connectors.offsets import OffsetRange
from connectors.reader import ReadPolicy
from service.errors import DataLoss, JournalCorrupt
from service.graph.base import RDD, GraphContext
from service.graph.counters import (
    Counts,
    DecodeErrors,
    EarliestTimestamp,
    InputRecords,
    LatestTimestamp,
    SkippedOffsets,
    add_count,
)
from service.graph.dstream import DStream
from service.graph.kafka_source import KafkaSource
from service.graph.plan import BatchPlan, SourcePlan
from service.graph.stateful import persist

TopicPartition = tuple[str, int]


class InputDStream(DStream):
    """A stream read from outside: plans each batch, and carries on after journaled plans."""

    def __init__(self, ctx: GraphContext, name: str, kind: str) -> None:
        super().__init__(ctx, [], kind)
        self.name = name
        self.params["name"] = name

    def plan(self, batch_time: int, interval_ms: int, rate: float | None) -> SourcePlan:
        """What batch `batch_time` reads; the next call plans the batch after it.

        `rate` is backpressure's records/s per partition (None: the source's maximum alone).
        """
        raise NotImplementedError

    def resume(self, journaled: Sequence[SourcePlan]) -> None:
        """Carries on after `journaled`, this source's journaled plans oldest first: the next
        `plan` starts where the last of them ended. Recovery calls it once, before planning."""
        raise NotImplementedError

    def plan_from_journal(
        self, ranges: Sequence[OffsetRange], extra: Mapping[str, Any]
    ) -> SourcePlan:
        """This source's part of a journaled plan (the journal stores every source's ranges
        and extra data flat, in one record)."""
        raise NotImplementedError

    def is_empty(self, plan: BatchPlan) -> bool:
        """A source has no parents: only it knows whether its plan reads anything."""
        raise NotImplementedError

    def check_replayable(self, plans: Sequence[BatchPlan]) -> None:
        """Refuses (`DataLoss`) when this source can no longer read its part of `plans`:
        journaled batches, oldest first, that recovery must compute again. A source that keeps
        its input (the queue source) has nothing to check."""


class QueueInputDStream(InputDStream):
    """A test source: batch n reads the n-th list given (empty once the lists run out).

    Its plan is the index of the list, so a recovering driver replays the same lists.
    """

    def __init__(self, ctx: GraphContext, name: str, batches: list[list[Any]]) -> None:
        super().__init__(ctx, name, "queue")
        self._batches = batches
        self._next_index = 0

    @property
    def _key(self) -> str:
        return f"queue:{self.name}"

    def plan(self, batch_time: int, interval_ms: int, rate: float | None) -> SourcePlan:
        index = self._next_index
        self._next_index += 1
        return SourcePlan(extra={self._key: index})

    def resume(self, journaled: Sequence[SourcePlan]) -> None:
        if journaled:
            self._next_index = self._index(journaled[-1]) + 1

    def plan_from_journal(
        self, ranges: Sequence[OffsetRange], extra: Mapping[str, Any]
    ) -> SourcePlan:
        if self._key not in extra:
            msg = (
                f"the journaled plan has no {self._key!r} entry for queue source {self.name!r} "
                f"(found keys: {sorted(extra)}); it was written by another graph: run that graph, "
                "or start this one under a new app id"
            )
            raise JournalCorrupt(msg)
        return SourcePlan(extra={self._key: int(extra[self._key])})

    def _index(self, plan: SourcePlan) -> int:
        return int(plan.extra[self._key])

    def _rows(self, plan: BatchPlan) -> list[Any]:
        index = self._index(plan.source(self.name))
        return self._batches[index] if index < len(self._batches) else []

    def is_empty(self, plan: BatchPlan) -> bool:
        return not self._rows(plan)

    def compute(self, plan: BatchPlan) -> RDD:
        rows = self._rows(plan)
        return self.ctx.sc.parallelize(rows, max(1, min(len(rows), self.ctx.default_partitions)))


class Watermarks(Protocol):
    """What a Kafka source asks its metadata client (`connectors.planner.ConfluentMetadata`)."""

    def watermarks(
        self, partitions: Sequence[TopicPartition]
    ) -> dict[TopicPartition, tuple[int, int]]: ...


class KafkaInputDStream(InputDStream):
    """Kafka records of the planned offset ranges, fetched by executors (never via the driver).

    Elements are `connectors.reader.SourceRecord`s, including the ones that failed to decode;
    `values()` keeps the decoded values only, `dead_letters()` the failures. What it reads and
    how is `source`, fixed at construction; `planner` and `metadata` are the driver's clients.
    """

    def __init__(
        self,
        ctx: GraphContext,
        source: KafkaSource,
        planner: Any,
        metadata: Watermarks | None = None,
    ) -> None:
        super().__init__(ctx, source.name, "kafka")
        self.source = source
        self.planner = planner
        self.metadata = metadata
        self._topics = set(source.topics) if source.topics is not None else None
        self._pattern = re.compile(source.pattern) if source.pattern is not None else None
        self.params["codec"] = source.codec
        self.params["subscription"] = source.subscription
        # It decides which records share a task (and a map-only output's partition), so it is
        # part of the graph a recovering driver compares; unset, the graph is unchanged.
        if source.max_partitions is not None:
            self.params["max_partitions"] = source.max_partitions
        if source.parse is not None:
            self.params["parse"] = source.parse

    @property
    def consumer_conf(self) -> dict[str, str]:
        """The librdkafka config executors read with (a warm standby connects with it early)."""
        return dict(self.source.consumer_conf)

    def lag(self) -> dict[tuple[str, int], int]:
        """Per partition: last stable offset minus the next offset to plan."""
        positions = self.planner.positions()
        if self.metadata is None or not positions:
            return {}
        marks = self.metadata.watermarks(list(positions))
        return {tp: max(0, marks[tp][1] - pos) for tp, pos in positions.items() if tp in marks}

    def owns(self, topic: str) -> bool:
        """Whether `topic` belongs to this source (to split journaled ranges among sources)."""
        if self._topics is not None:
            return topic in self._topics
        return self._pattern is not None and self._pattern.fullmatch(topic) is not None

    def plan(self, batch_time: int, interval_ms: int, rate: float | None) -> SourcePlan:
        return SourcePlan(tuple(self.planner.plan(batch_time, interval_ms, rate)))

    def resume(self, journaled: Sequence[SourcePlan]) -> None:
        """Each partition continues at the end of its latest journaled range."""
        positions: dict[TopicPartition, int] = {}
        for plan in journaled:
            for r in sorted(plan.ranges):
                positions[r.topic_partition] = r.until_offset
        self.planner.resume(positions)

    def plan_from_journal(
        self, ranges: Sequence[OffsetRange], extra: Mapping[str, Any]
    ) -> SourcePlan:
        return SourcePlan(tuple(r for r in ranges if self.owns(r.topic)))

    def is_empty(self, plan: BatchPlan) -> bool:
        return plan.source(self.name).offsets == 0

    def check_replayable(self, plans: Sequence[BatchPlan]) -> None:
        """Each partition's first offset to read again must still be in Kafka (retention may
        have deleted it since the batch was journaled)."""
        first = first_offsets(self.name, plans)
        if not first or self.metadata is None:
            return
        for tp, (low, _high) in self.metadata.watermarks(sorted(first)).items():
            offset, batch_time = first[tp]
            if low > offset:
                raise replay_data_loss(tp, offset, low, batch_time)

    def compute(self, plan: BatchPlan) -> RDD:
        from connectors.planner import pack_ranges, split_ranges

        ranges = [r for r in plan.source(self.name).ranges if r.count]
        source = self.source
        pieces = split_ranges(ranges, source.min_partitions)
        if not pieces:
            return self.ctx.sc.emptyRDD()
        groups = pack_ranges(pieces, self.read_tasks(plan))
        slices = self.ctx.sc.parallelize(groups, len(groups))
        counters = self.ctx.input_counters
        values_only = not self._needs_metadata()
        read = partial(
            read_partition,
            self.consumer_conf,
            source.reads_with,
            counters,
            values_only,
            source.read_policy,
        )
        rdd = slices.mapPartitions(read)
        if self.computations_per_batch() > 1:
            # Several outputs (or dead letters beside them) read this RDD: fetch from Kafka, and
            # count the records, once per batch. On disk when memory runs short, since a block
            # dropped would be read again. `forget` releases it after the batch.
            rdd = persist(rdd)
        return rdd

    def read_tasks(self, plan: BatchPlan) -> int | None:
        """The most tasks that read `plan`: the source's `max_partitions`, else the batch's
        layout (never below `min_partitions`); None: one per piece."""
        if self.source.max_partitions is not None or plan.layout is None:
            return self.source.max_partitions
        return max(plan.layout.tasks, self.source.min_partitions)

    def values(self) -> DStream:
        """The decoded values of the records that decoded."""
        return self._pipe("values", lambda rdd: rdd.mapPartitions(values_of))

    def records(self) -> DStream:
        """The `SourceRecord`s that decoded, with their Kafka timestamps (CreateTime or
        LogAppendTime): what `event_time="kafka"` of an event window reads."""
        return self._pipe("records", lambda rdd: rdd.filter(_decoded))

    def dead_letters(self) -> DStream:
        """The `SourceRecord`s that failed to decode (or whose parse function raised)."""
        return self._pipe("dead_letters", lambda rdd: rdd.filter(_failed))

    def _needs_metadata(self) -> bool:
        # Only `values()` and `dead_letters()` understand the values-only fast path; any other
        # consumer of this stream sees full `SourceRecord`s.
        return any(child.kind not in ("values", "dead_letters") for child in self.children)


def first_offsets(source: str, plans: Sequence[BatchPlan]) -> dict[TopicPartition, tuple[int, int]]:
    """Per partition, the first offset `plans` (oldest first) read of `source`, and the batch.

    >>> plans = [BatchPlan(t, {"s": SourcePlan((OffsetRange("a", 0, f, f + 5),))})
    ...          for t, f in [(1000, 10), (2000, 15)]]
    >>> first_offsets("s", plans)
    {('a', 0): (10, 1000)}
    """
    first: dict[TopicPartition, tuple[int, int]] = {}
    for plan in plans:
        for r in plan.source(source).ranges:
            if r.count and r.topic_partition not in first:
                first[r.topic_partition] = (r.from_offset, plan.batch_time)
    return first


def replay_data_loss(tp: TopicPartition, first: int, low: int, batch_time: int) -> DataLoss:
    msg = (
        f"recovery must compute batch {batch_time} again, which read topic {tp[0]!r} partition "
        f"{tp[1]} from offset {first}, but the earliest offset Kafka still holds is {low} "
        f"(offsets {first}..{low - 1} were deleted by retention), so the state cannot be "
        "rebuilt exactly. Raise the topic's retention above the checkpoint interval, restore "
        "the journal and checkpoints from a copy, or start the job under a new app id (its "
        "state then starts empty)."
    )
    return DataLoss(msg)


def read_partition(
    conf: dict[str, str],
    codec: Any,
    counters: Any,
    values_only: bool,
    policy: ReadPolicy,
    slices: Iterable[list[OffsetRange]],
) -> Iterator[Any]:
    """Executor side: reads this task's ranges, counting records per partition, failures and
    the offsets skipped because retention deleted them."""
    from dataclasses import replace

    from connectors.reader import SourceRecord, read_range

    counts: Counts = {}

    def note_lost(lost: OffsetRange) -> None:
        run = SkippedOffsets(lost.topic, lost.partition, lost.from_offset, lost.until_offset)
        counts[run] = 1

    def note_timestamps(r: OffsetRange, earliest: int, latest: int) -> None:
        add_count(counts, EarliestTimestamp(r.topic, r.partition), earliest)
        add_count(counts, LatestTimestamp(r.topic, r.partition), latest)

    read_policy = replace(policy, on_lost=note_lost, on_timestamps=note_timestamps)
    for r in (r for batch in slices for r in batch):
        records = failures = 0
        for record in read_range(conf, r, codec, values_only=values_only, policy=read_policy):
            records += 1
            if type(record) is SourceRecord and record.error is not None:
                failures += 1
            yield record
        add_count(counts, InputRecords(r.topic, r.partition), records)
        if failures:
            add_count(counts, DecodeErrors(r.topic), failures)
    if counters is not None:
        counters.add(counts)


def values_of(records: Iterable[Any]) -> Iterator[Any]:
    """Decoded values, whether records arrive whole or on the values-only fast path."""
    from connectors.reader import SourceRecord

    for record in records:
        if type(record) is not SourceRecord:
            yield record
        elif record.error is None:
            yield record.value


def _decoded(record: Any) -> bool:
    return not _failed(record)


def _failed(record: Any) -> bool:
    from connectors.reader import SourceRecord

    return type(record) is SourceRecord and record.error is not None
