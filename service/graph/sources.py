"""Input DStreams: what a batch reads is decided (planned) on the driver and journaled as data.

A source plans batch `t` before any work runs; the plan is exported to the journal and can be
imported back on recovery, so a replayed batch reads exactly what the first attempt read.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from functools import partial
from typing import TYPE_CHECKING, Any

from connectors.offsets import OffsetRange
from connectors.reader import ReadPolicy
from service.graph.dstream import RDD, DStream

if TYPE_CHECKING:
    from service.graph.context import StreamingContext


class InputDStream(DStream):
    """A stream read from outside; plans, exports and imports what each batch covers."""

    def __init__(self, ctx: StreamingContext, name: str, kind: str) -> None:
        super().__init__(ctx, [], kind)
        self.name = name
        self.params["name"] = name

    def plan(self, batch_time: int, interval_ms: int) -> None:
        raise NotImplementedError

    def export_plan(self, batch_time: int) -> tuple[list[OffsetRange], dict[str, Any]]:
        """(offset ranges, other JSON data) that make batch `batch_time` reproducible."""
        raise NotImplementedError

    def import_plan(
        self, batch_time: int, ranges: list[OffsetRange], extra: dict[str, Any]
    ) -> None:
        raise NotImplementedError

    def forget_plan(self, batch_time: int) -> None:
        """Drops plans up to and including `batch_time` once the batch is done."""


class QueueInputDStream(InputDStream):
    """A test source: batch n reads the n-th list given (empty once the lists run out).

    Its plan is the index of the list, so a recovering driver replays the same lists.
    """

    def __init__(self, ctx: StreamingContext, name: str, batches: list[list[Any]]) -> None:
        super().__init__(ctx, name, "queue")
        self._batches = batches
        self._next_index = 0
        self._plans: dict[int, int] = {}

    def plan(self, batch_time: int, interval_ms: int) -> None:
        self._plans[batch_time] = self._next_index
        self._next_index += 1

    def export_plan(self, batch_time: int) -> tuple[list[OffsetRange], dict[str, Any]]:
        return [], {f"queue:{self.name}": self._plans[batch_time]}

    def import_plan(
        self, batch_time: int, ranges: list[OffsetRange], extra: dict[str, Any]
    ) -> None:
        index = int(extra[f"queue:{self.name}"])
        self._plans[batch_time] = index
        self._next_index = max(self._next_index, index + 1)

    def _rows(self, batch_time: int) -> list[Any]:
        index = self._plans[batch_time]
        return self._batches[index] if index < len(self._batches) else []

    def is_empty(self, batch_time: int) -> bool:
        return not self._rows(batch_time)

    def compute(self, batch_time: int) -> RDD:
        rows = self._rows(batch_time)
        return self.ctx.sc.parallelize(rows, max(1, min(len(rows), self.ctx.default_partitions)))


class KafkaInputDStream(InputDStream):
    """Kafka records of the planned offset ranges, fetched by executors (never via the driver).

    Elements are `connectors.reader.SourceRecord`s, including the ones that failed to decode;
    `values()` keeps the decoded values only, `dead_letters()` the failures.
    """

    def __init__(
        self,
        ctx: StreamingContext,
        name: str,
        planner: Any,
        consumer_conf: dict[str, str],
        codec: str,
        min_partitions: int,
        subscription: list[str] | str,
    ) -> None:
        super().__init__(ctx, name, "kafka")
        self.planner = planner
        self._topics = set(subscription) if isinstance(subscription, list) else None
        self._pattern = re.compile(subscription) if isinstance(subscription, str) else None
        self._conf = consumer_conf
        self._codec = codec
        self._min_partitions = min_partitions
        self._plans: dict[int, list[OffsetRange]] = {}
        self.params["codec"] = codec
        self.params["subscription"] = subscription
        # What a read does with undecodable records and deleted offsets; the wiring replaces it
        # with the one the source's settings ask for.
        self.read_policy = ReadPolicy(fail_on_data_loss=planner.fail_on_data_loss)

    metadata: Any = None

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

    def plan(self, batch_time: int, interval_ms: int) -> None:
        rate = self.ctx.rate_override
        self._plans[batch_time] = self.planner.plan(batch_time, interval_ms, rate)

    def export_plan(self, batch_time: int) -> tuple[list[OffsetRange], dict[str, Any]]:
        return list(self._plans[batch_time]), {}

    def import_plan(
        self, batch_time: int, ranges: list[OffsetRange], extra: dict[str, Any]
    ) -> None:
        mine = [r for r in ranges if self.owns(r.topic)]
        self._plans[batch_time] = mine

    def forget_plan(self, batch_time: int) -> None:
        for t in [t for t in self._plans if t <= batch_time]:
            del self._plans[t]

    def ranges(self, batch_time: int) -> list[OffsetRange]:
        return self._plans.get(batch_time, [])

    def is_empty(self, batch_time: int) -> bool:
        return all(r.count == 0 for r in self.ranges(batch_time))

    def compute(self, batch_time: int) -> RDD:
        from connectors.planner import split_ranges

        pieces = split_ranges([r for r in self.ranges(batch_time) if r.count], self._min_partitions)
        if not pieces:
            return self.ctx.sc.emptyRDD()
        slices = self.ctx.sc.parallelize([[piece] for piece in pieces], len(pieces))
        counters = self.ctx.input_counters
        codec = self._codec_object or self._codec
        values_only = not self._needs_metadata()
        read = partial(read_partition, self._conf, codec, counters, values_only, self.read_policy)
        rdd = slices.mapPartitions(read)
        if self.ctx.dead_letters_enabled:
            # Two jobs (outputs and dead letters) read this RDD; fetch from Kafka only once.
            rdd = rdd.cache()
        return rdd

    def decode_with(self, codec: Any) -> None:
        """Decodes with a codec object (Avro, keys) instead of the codec named at construction."""
        self._codec_object = codec

    def parse_with(self, function: Any) -> None:
        """Applies `function` to each decoded value while reading; a value it raises on becomes a
        dead letter (with its original bytes) instead of failing the batch."""
        from connectors.codecs import ParsingCodec

        self._codec_object = ParsingCodec(self._codec_object or self._codec, function)
        self.params["parse"] = f"{function.__module__}.{function.__qualname__}"

    _codec_object: Any = None

    def values(self) -> DStream:
        """The decoded values of the records that decoded."""
        return self._pipe("values", lambda rdd: rdd.mapPartitions(values_of))

    def dead_letters(self) -> DStream:
        """The `SourceRecord`s that failed to decode (or whose parse function raised)."""
        return self._pipe("dead_letters", lambda rdd: rdd.filter(_failed))

    def _needs_metadata(self) -> bool:
        # Only `values()` and `dead_letters()` understand the values-only fast path; any other
        # consumer of this stream sees full `SourceRecord`s.
        children = [s for s in self.ctx.streams if self in s.parents]
        return any(child.kind not in ("values", "dead_letters") for child in children)


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

    counts: dict[str, int] = {}

    def note_lost(lost: OffsetRange) -> None:
        key = lost_counter_key(lost)
        counts[key] = counts.get(key, 0) + 1

    read_policy = replace(policy, on_lost=note_lost)
    for r in (r for batch in slices for r in batch):
        records = failures = 0
        for record in read_range(conf, r, codec, values_only=values_only, policy=read_policy):
            records += 1
            if type(record) is SourceRecord and record.error is not None:
                failures += 1
            yield record
        key = input_counter_key(r.topic, r.partition)
        counts[key] = counts.get(key, 0) + records
        counts["records"] = counts.get("records", 0) + records
        counts["decode_errors"] = counts.get("decode_errors", 0) + failures
        if failures:
            error_key = decode_error_counter_key(r.topic)
            counts[error_key] = counts.get(error_key, 0) + failures
    if counters is not None:
        counters.add(counts)


def input_counter_key(topic: str, partition: int) -> str:
    return f"in\t{topic}\t{partition}"


def decode_error_counter_key(topic: str) -> str:
    return f"decode\t{topic}"


def lost_counter_key(lost: OffsetRange) -> str:
    """Names a run of offsets a read skipped (deleted by retention). The range is in the key, not
    the count, because a source RDD read by several jobs reports the same run more than once."""
    return f"lost\t{lost.topic}\t{lost.partition}\t{lost.from_offset}\t{lost.until_offset}"


def parse_lost_counter_key(key: str) -> OffsetRange | None:
    """The skipped run of offsets a `lost_counter_key` names, else None."""
    parts = key.split("\t")
    if len(parts) != 5 or parts[0] != "lost":
        return None
    return OffsetRange(parts[1], int(parts[2]), int(parts[3]), int(parts[4]))


def parse_input_counter_key(key: str) -> tuple[str, int] | None:
    parts = key.split("\t")
    if len(parts) != 3 or parts[0] != "in":
        return None
    return parts[1], int(parts[2])


def values_of(records: Iterable[Any]) -> Iterator[Any]:
    """Decoded values, whether records arrive whole or on the values-only fast path."""
    from connectors.reader import SourceRecord

    for record in records:
        if type(record) is not SourceRecord:
            yield record
        elif record.error is None:
            yield record.value


def _failed(record: Any) -> bool:
    from connectors.reader import SourceRecord

    return type(record) is SourceRecord and record.error is not None
