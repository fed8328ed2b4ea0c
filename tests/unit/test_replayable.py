"""Retention refusal: recovery asks each source whether it can still read the journaled batches it
must compute again; a Kafka source compares each partition's first offset with Kafka's earliest.

No broker: the source's metadata client is a fake that answers with fixed watermarks.
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from connectors.offsets import OffsetRange
from service.errors import DataLoss
from service.graph.context import StreamingContext
from service.graph.kafka_source import KafkaSource
from service.graph.plan import BatchPlan, SourcePlan
from service.graph.sources import KafkaInputDStream

pytestmark = pytest.mark.unit
TopicPartition = tuple[str, int]


class FixedWatermarks:
    """Kafka's (low, high) watermarks per partition, as the metadata client reports them."""

    def __init__(self, marks: dict[TopicPartition, tuple[int, int]]) -> None:
        self.marks = marks
        self.asked: list[list[TopicPartition]] = []

    def watermarks(
        self, partitions: Sequence[TopicPartition]
    ) -> dict[TopicPartition, tuple[int, int]]:
        self.asked.append(list(partitions))
        return {tp: self.marks[tp] for tp in partitions}


def kafka_source(ctx: StreamingContext, low: dict[TopicPartition, int]) -> KafkaInputDStream:
    marks = FixedWatermarks({tp: (offset, 10_000) for tp, offset in low.items()})
    return KafkaInputDStream(ctx, KafkaSource("words", {}, topics=("w",)), None, marks)


def batches() -> list[BatchPlan]:
    """Batches 1000 and 2000: partition 0 reads 100..150 and 150..200; partition 1 reads only
    in batch 2000 (its range in batch 1000 is empty, so its first offset is 40)."""
    return [
        BatchPlan(
            1000,
            {"words": SourcePlan((OffsetRange("w", 0, 100, 150), OffsetRange("w", 1, 40, 40)))},
        ),
        BatchPlan(
            2000,
            {"words": SourcePlan((OffsetRange("w", 0, 150, 200), OffsetRange("w", 1, 40, 70)))},
        ),
    ]


def test_offsets_still_in_kafka_pass() -> None:
    source = kafka_source(StreamingContext(None, "app", 1000), {("w", 0): 100, ("w", 1): 40})
    source.check_replayable(batches())


def test_offsets_deleted_by_retention_are_refused_naming_partition_offsets_and_batch() -> None:
    source = kafka_source(StreamingContext(None, "app", 1000), {("w", 0): 100, ("w", 1): 55})
    with pytest.raises(DataLoss) as refused:
        source.check_replayable(batches())
    message = str(refused.value)
    assert "batch 2000" in message
    assert "topic 'w' partition 1 from offset 40" in message
    assert "earliest offset Kafka still holds is 55" in message
    assert "Raise the topic's retention" in message


def test_nothing_to_read_again_asks_kafka_nothing() -> None:
    source = kafka_source(StreamingContext(None, "app", 1000), {})
    source.check_replayable([])
    assert isinstance(source.metadata, FixedWatermarks)
    assert source.metadata.asked == []


def test_a_queue_source_keeps_its_input_and_never_refuses() -> None:
    ctx = StreamingContext(None, "app", 1000)
    queue = ctx.queue_stream([[1], [2]])
    queue.check_replayable([BatchPlan(1000, {"queue": SourcePlan(extra={"queue:queue": 0})})])


def test_max_partitions_is_part_of_the_graph_and_absent_when_unset() -> None:
    """It decides which records share a read task (and a map-only output's partition), so a
    recovering driver must refuse a change of it; unset, the graph is what it was before."""

    def fingerprint(max_partitions: int | None = None) -> tuple[str, dict[str, object]]:
        ctx = StreamingContext(None, "app", 1000)
        conf = {"bootstrap.servers": "localhost:1"}
        lines = ctx.kafka_stream("lines", conf, topics=["w"], max_partitions=max_partitions)
        ctx.close()
        return ctx.fingerprint(), dict(lines.params)

    plain, plain_params = fingerprint()
    assert "max_partitions" not in plain_params
    packed, packed_params = fingerprint(max_partitions=2)
    assert packed_params["max_partitions"] == 2
    assert packed != plain
    assert fingerprint(max_partitions=3)[0] not in {plain, packed}
