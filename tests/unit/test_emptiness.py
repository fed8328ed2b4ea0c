"""Emptiness: each kind of stream decides from the plan alone whether its batch yields no rows.

No Spark is needed: `is_empty` never looks at data, which is what makes skipping a batch's job
deterministic across replays.
"""

from __future__ import annotations

from typing import Any

import pytest

from connectors.offsets import OffsetRange
from service.graph.context import StreamingContext
from service.graph.dstream import DStream
from service.graph.kafka_source import KafkaSource
from service.graph.plan import BatchPlan, SourcePlan
from service.graph.sources import KafkaInputDStream

FULL, EMPTY = 0, 1  # indexes into each queue's lists below


def two_queues() -> tuple[StreamingContext, DStream, DStream]:
    ctx = StreamingContext(None, "empty", 1000)
    left = ctx.queue_stream([[("a", 1)], []], "left")
    right = ctx.queue_stream([[("a", 2)], []], "right")
    return ctx, left, right


def plan(left: int, right: int) -> BatchPlan:
    return BatchPlan(
        1000,
        {
            "left": SourcePlan(extra={"queue:left": left}),
            "right": SourcePlan(extra={"queue:right": right}),
        },
    )


def emptiness(stream: DStream) -> list[bool]:
    """`is_empty` for (left, right) = (full, full), (full, empty), (empty, full), (empty, empty)."""
    cases = [(FULL, FULL), (FULL, EMPTY), (EMPTY, FULL), (EMPTY, EMPTY)]
    return [stream.is_empty(plan(left, right)) for left, right in cases]


def test_queue_source_is_empty_for_an_empty_list_and_past_the_end() -> None:
    _, left, _ = two_queues()
    assert emptiness(left) == [False, False, True, True]
    assert left.is_empty(plan(left=7, right=FULL))


def test_one_parent_operators_follow_their_parent() -> None:
    _, left, _ = two_queues()
    stream = left.map_values(str).filter(bool).reduce_by_key(max).coalesce(1)
    assert emptiness(stream) == [False, False, True, True]


def test_union_is_empty_only_when_every_parent_is() -> None:
    _, left, right = two_queues()
    assert emptiness(left.union(right)) == [False, False, False, True]


@pytest.mark.parametrize("build", [lambda s: s.count(), lambda s: s.transform(lambda r, t: r)])
def test_transform_and_count_produce_rows_from_nothing(build: Any) -> None:
    _, left, _ = two_queues()
    stream = build(left)
    assert emptiness(stream) == [False, False, False, False]
    # Their consumers inherit it: a map of a count is never empty either.
    assert emptiness(stream.map(str)) == [False, False, False, False]


def test_inner_join_is_empty_when_either_side_is() -> None:
    _, left, right = two_queues()
    assert emptiness(left.join(right)) == [False, True, True, True]


def test_left_outer_join_is_empty_exactly_when_the_left_is() -> None:
    _, left, right = two_queues()
    assert emptiness(left.left_outer_join(right)) == [False, False, True, True]


def kafka_source(ctx: StreamingContext, name: str, topics: list[str]) -> KafkaInputDStream:
    return KafkaInputDStream(ctx, KafkaSource(name, {}, topics=tuple(topics)), None)


def test_kafka_source_is_empty_when_its_own_ranges_span_no_offsets() -> None:
    ctx = StreamingContext(None, "empty", 1000)
    words = kafka_source(ctx, "words", ["w"])
    kafka_source(ctx, "other", ["o"])

    def batch(words_until: int, other_until: int) -> BatchPlan:
        return BatchPlan(
            1000,
            {
                "words": SourcePlan(
                    (OffsetRange("w", 0, 4, 4), OffsetRange("w", 1, 9, words_until))
                ),
                "other": SourcePlan((OffsetRange("o", 0, 0, other_until),)),
            },
        )

    assert words.is_empty(batch(words_until=9, other_until=100))
    assert not words.is_empty(batch(words_until=10, other_until=0))
    assert words.values().is_empty(batch(words_until=9, other_until=100))
