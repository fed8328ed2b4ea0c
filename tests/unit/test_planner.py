"""Planner arithmetic against a fake cluster: starting offsets, rate limits, LSO bound, new
partitions, resume, data loss and splitting into Spark partitions."""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

import pytest
from confluent_kafka import KafkaError
from hypothesis import given
from hypothesis import strategies as st

from connectors.kafka_client import is_transient
from connectors.offsets import OffsetRange
from connectors.planner import (
    OffsetPlanner,
    StartingOffsets,
    TopicPartition,
    Watermarks,
    pack_ranges,
    partition_bounds_problem,
    split_ranges,
)
from service.errors import ConfigError, DataLoss

T0 = 1_700_000_000_000
SECOND = 1000


@dataclass
class FakeMetadata:
    """A cluster as plain dicts: `(earliest, last stable)` per partition, and so on."""

    marks: dict[TopicPartition, Watermarks] = field(default_factory=dict)
    by_timestamp: dict[TopicPartition, int | None] = field(default_factory=dict)
    committed: dict[TopicPartition, int | None] = field(default_factory=dict)
    unreadable: set[TopicPartition] = field(default_factory=set)
    calls: list[str] = field(default_factory=list)

    def partitions_of(self, topics: Sequence[str]) -> list[TopicPartition]:
        # Reverse order on purpose: the planner must sort.
        return sorted((tp for tp in self.marks if tp[0] in topics), reverse=True)

    def partitions_matching(self, pattern: re.Pattern[str]) -> list[TopicPartition]:
        return [tp for tp in self.marks if pattern.fullmatch(tp[0])]

    def watermarks(self, partitions: Sequence[TopicPartition]) -> dict[TopicPartition, Watermarks]:
        return {tp: self.marks[tp] for tp in partitions if tp not in self.unreadable}

    def offsets_for_timestamp(
        self, partitions: Sequence[TopicPartition], timestamp_ms: int
    ) -> dict[TopicPartition, int | None]:
        self.calls.append(f"timestamp:{timestamp_ms}")
        return {tp: self.by_timestamp.get(tp) for tp in partitions}

    def committed_offsets(
        self, partitions: Sequence[TopicPartition]
    ) -> dict[TopicPartition, int | None]:
        self.calls.append("committed")
        return {tp: self.committed.get(tp) for tp in partitions}

    def produce(self, tp: TopicPartition, count: int) -> None:
        earliest, stable = self.marks[tp]
        self.marks[tp] = (earliest, stable + count)

    def delete_before(self, tp: TopicPartition, offset: int) -> None:
        self.marks[tp] = (offset, max(offset, self.marks[tp][1]))


def planner(
    meta: FakeMetadata,
    starting: StartingOffsets | None = None,
    *,
    topics: list[str] | None = None,
    pattern: str | None = None,
    rate: float | None = None,
    fail_on_data_loss: bool = True,
) -> OffsetPlanner:
    if topics is None and pattern is None:
        topics = ["a", "b"]
    return OffsetPlanner(
        meta,
        topics=topics,
        pattern=pattern,
        starting=starting or StartingOffsets.earliest(),
        max_rate_per_partition=rate,
        fail_on_data_loss=fail_on_data_loss,
    )


def spans(ranges: list[OffsetRange]) -> list[tuple[str, int, int, int]]:
    return [(r.topic, r.partition, r.from_offset, r.until_offset) for r in ranges]


@pytest.fixture
def meta() -> FakeMetadata:
    return FakeMetadata(marks={("a", 0): (0, 100), ("a", 1): (10, 50), ("b", 0): (0, 0)})


# --- starting offsets --------------------------------------------------------------------------


def test_earliest_reads_everything_stored_and_keeps_empty_ranges(meta: FakeMetadata) -> None:
    ranges = planner(meta).plan(T0, SECOND)
    assert spans(ranges) == [("a", 0, 0, 100), ("a", 1, 10, 50), ("b", 0, 0, 0)]


def test_latest_starts_at_the_end_and_then_follows_new_data(meta: FakeMetadata) -> None:
    p = planner(meta, StartingOffsets.latest())
    assert spans(p.plan(T0, SECOND)) == [("a", 0, 100, 100), ("a", 1, 50, 50), ("b", 0, 0, 0)]
    meta.produce(("a", 1), 7)
    assert spans(p.plan(T0 + SECOND, SECOND))[1] == ("a", 1, 50, 57)


def test_committed_uses_group_offsets_and_falls_back_per_partition(meta: FakeMetadata) -> None:
    meta.committed = {("a", 0): 42}
    ranges = planner(meta, StartingOffsets.committed(fallback="latest")).plan(T0, SECOND)
    assert spans(ranges) == [("a", 0, 42, 100), ("a", 1, 50, 50), ("b", 0, 0, 0)]
    ranges = planner(meta, StartingOffsets.committed(fallback="earliest")).plan(T0, SECOND)
    assert spans(ranges)[1] == ("a", 1, 10, 50)


def test_timestamp_starts_at_first_newer_record_or_at_the_end(meta: FakeMetadata) -> None:
    meta.by_timestamp = {("a", 0): 60, ("a", 1): None, ("b", 0): None}
    ranges = planner(meta, StartingOffsets.at_timestamp(T0 - 5000)).plan(T0, SECOND)
    assert spans(ranges) == [("a", 0, 60, 100), ("a", 1, 50, 50), ("b", 0, 0, 0)]
    assert meta.calls == [f"timestamp:{T0 - 5000}"]


def test_explicit_offsets_with_fallback_for_partitions_not_named(meta: FakeMetadata) -> None:
    starting = StartingOffsets.explicit({("a", 1): 20}, fallback="latest")
    ranges = planner(meta, starting).plan(T0, SECOND)
    assert spans(ranges) == [("a", 0, 100, 100), ("a", 1, 20, 50), ("b", 0, 0, 0)]


def test_starting_policy_is_asked_only_on_the_first_batch(meta: FakeMetadata) -> None:
    meta.committed = {("a", 0): 5}
    p = planner(meta, StartingOffsets.committed())
    p.plan(T0, SECOND)
    p.plan(T0 + SECOND, SECOND)
    assert meta.calls == ["committed"]


def test_starting_offsets_validation() -> None:
    with pytest.raises(ConfigError, match="timestamp_ms >= 0"):
        StartingOffsets("timestamp")
    with pytest.raises(ConfigError, match=">= 0"):
        StartingOffsets.explicit({("a", 0): -1})
    with pytest.raises(ConfigError, match="unknown"):
        StartingOffsets("newest")  # type: ignore[arg-type]  # wrong on purpose


# --- rate limits and the LSO bound -------------------------------------------------------------


def test_rate_limit_bounds_each_partition_and_batches_are_contiguous(meta: FakeMetadata) -> None:
    p = planner(meta, rate=20.0)  # 20 records/s over 2 s batches: 40 offsets per partition
    first = p.plan(T0, 2 * SECOND)
    second = p.plan(T0 + 2 * SECOND, 2 * SECOND)
    third = p.plan(T0 + 4 * SECOND, 2 * SECOND)
    assert spans(first)[:2] == [("a", 0, 0, 40), ("a", 1, 10, 50)]
    assert spans(second)[:2] == [("a", 0, 40, 80), ("a", 1, 50, 50)]
    assert spans(third)[:2] == [("a", 0, 80, 100), ("a", 1, 50, 50)]
    assert p.positions() == {("a", 0): 100, ("a", 1): 50, ("b", 0): 0}


def test_until_never_passes_the_last_stable_offset(meta: FakeMetadata) -> None:
    p = planner(meta)
    p.plan(T0, SECOND)
    meta.produce(("a", 0), 5)  # the LSO moves by 5: an open transaction holds the rest back
    assert spans(p.plan(T0 + SECOND, SECOND))[0] == ("a", 0, 100, 105)


@pytest.mark.parametrize(
    ("rate", "interval_ms", "budget"),
    [
        (3.3, 10 * SECOND, 33),  # decimal arithmetic: binary floats would give 32
        (0.1, SECOND, 1),  # a positive rate always makes progress
        (1000.0, 250, 250),
        (float("inf"), SECOND, 1000),
        (0.0, SECOND, 0),  # zero pauses the source
    ],
)
def test_rate_budget(rate: float, interval_ms: int, budget: int) -> None:
    meta = FakeMetadata(marks={("a", 0): (0, 1000)})
    ranges = planner(meta, topics=["a"], rate=rate).plan(T0, interval_ms)
    assert ranges[0].count == budget


def test_the_backpressure_rate_is_capped_by_the_maximum(meta: FakeMetadata) -> None:
    assert planner(meta, rate=10.0).plan(T0, SECOND, rate=3.0)[0].count == 3
    assert planner(meta, rate=10.0).plan(T0, SECOND, rate=50.0)[0].count == 10
    assert planner(meta).plan(T0, SECOND, rate=7.0)[0].count == 7


def test_invalid_rates_and_intervals_are_rejected(meta: FakeMetadata) -> None:
    with pytest.raises(ConfigError, match="max_rate_per_partition"):
        planner(meta, rate=-1.0)
    with pytest.raises(ConfigError, match="rate"):
        planner(meta).plan(T0, SECOND, rate=float("nan"))
    with pytest.raises(ValueError, match="interval"):
        planner(meta).plan(T0, 0)


# --- partitions and topics appearing while running ---------------------------------------------


def test_partitions_added_while_running_start_at_earliest(meta: FakeMetadata) -> None:
    p = planner(meta, StartingOffsets.latest())
    p.plan(T0, SECOND)
    meta.marks[("a", 2)] = (3, 9)  # the topic grew
    assert ("a", 2, 3, 9) in spans(p.plan(T0 + SECOND, SECOND))


def test_pattern_picks_up_new_matching_topics_from_earliest(meta: FakeMetadata) -> None:
    p = planner(meta, StartingOffsets.latest(), pattern=r"a|c\d")
    assert [r.topic for r in p.plan(T0, SECOND)] == ["a", "a"]
    meta.marks[("c1", 0)] = (0, 4)
    meta.marks[("cx", 0)] = (0, 4)  # does not match
    assert spans(p.plan(T0 + SECOND, SECOND)) == [
        ("a", 0, 100, 100),
        ("a", 1, 50, 50),
        ("c1", 0, 0, 4),
    ]


def test_a_listed_topic_created_later_is_read_from_its_start(meta: FakeMetadata) -> None:
    p = planner(meta, StartingOffsets.latest(), topics=["a", "late"])
    p.plan(T0, SECOND)
    meta.marks[("late", 0)] = (0, 3)
    assert spans(p.plan(T0 + SECOND, SECOND))[-1] == ("late", 0, 0, 3)


def test_unreadable_partition_keeps_its_place_and_new_one_waits(meta: FakeMetadata) -> None:
    p = planner(meta, StartingOffsets.latest())
    meta.unreadable = {("a", 1), ("b", 0)}
    assert spans(p.plan(T0, SECOND)) == [("a", 0, 100, 100)]
    meta.unreadable = {("a", 0)}
    meta.produce(("a", 0), 5)
    meta.produce(("a", 1), 5)
    # a-0 is known: an empty range at its place. a-1 and b-0 were present on the first batch,
    # so they still get the starting policy (latest), not earliest.
    assert spans(p.plan(T0 + SECOND, SECOND)) == [
        ("a", 0, 100, 100),
        ("a", 1, 55, 55),
        ("b", 0, 0, 0),
    ]


# --- resume ------------------------------------------------------------------------------------


def test_resume_continues_from_journaled_positions(meta: FakeMetadata) -> None:
    meta.committed = {("a", 0): 1}
    p = planner(meta, StartingOffsets.committed())
    p.resume({("a", 0): 70, ("a", 1): 50})
    # b-0 is not in the journal: it appeared while the service was down, so earliest.
    assert spans(p.plan(T0, SECOND)) == [("a", 0, 70, 100), ("a", 1, 50, 50), ("b", 0, 0, 0)]
    assert meta.calls == []  # the starting policy is not consulted after a resume


def test_positions_round_trip_through_resume(meta: FakeMetadata) -> None:
    first = planner(meta, rate=10.0)
    first.plan(T0, SECOND)
    second = planner(meta, rate=10.0)
    second.resume(first.positions())
    assert second.plan(T0 + SECOND, SECOND) == first.plan(T0 + SECOND, SECOND)


def test_resume_rejects_negative_positions(meta: FakeMetadata) -> None:
    with pytest.raises(ValueError, match="journal"):
        planner(meta).resume({("a", 0): -1})


# --- the batches of a driver's down time ----------------------------------------------------------


class AskCounter(FakeMetadata):
    """The fake cluster, counting the watermark requests (one per plan that asks the brokers)."""

    asked: int = 0

    def watermarks(self, partitions: Sequence[TopicPartition]) -> dict[TopicPartition, Watermarks]:
        self.asked += 1
        return super().watermarks(partitions)


def down_time_planner(meta: FakeMetadata, now_ms: list[int], rate: float | None) -> OffsetPlanner:
    """A planner whose batch times follow a wall clock that reads `now_ms[0]`."""
    p = planner(meta, rate=rate)
    p.clock_ms = lambda: now_ms[0]
    return p


def counted(ranges: list[OffsetRange]) -> list[int]:
    return [r.count for r in ranges]


def test_a_backlog_spreads_over_the_down_time_batches_within_the_rate_budget() -> None:
    meta = AskCounter(marks={("a", 0): (0, 35), ("b", 0): (0, 12)})
    now = [T0 + 60 * SECOND]  # the driver came back a minute after batch T0
    p = down_time_planner(meta, now, rate=10)
    down_time = [p.plan(T0 + n * SECOND, SECOND) for n in range(60)]
    assert [counted(ranges) for ranges in down_time[:5]] == [
        [10, 10],
        [10, 2],
        [10, 0],
        [5, 0],
        [0, 0],
    ]
    assert sum(sum(counted(ranges)) for ranges in down_time) == 35 + 12
    # Batch T0 + 3 s read the backlog's end: the 56 batches after it, all due before the
    # clock's reading at that plan, were planned without asking the brokers.
    assert meta.asked == 4
    assert spans(down_time[-1]) == [("a", 0, 35, 35), ("b", 0, 12, 12)]


def test_records_that_arrive_during_the_catch_up_go_to_the_first_batch_after_it() -> None:
    meta = AskCounter(marks={("a", 0): (0, 5), ("b", 0): (0, 0)})
    now = [T0 + 10 * SECOND]
    p = down_time_planner(meta, now, rate=None)
    assert counted(p.plan(T0, SECOND)) == [5, 0]
    meta.produce(("a", 0), 3)  # after the plan asked: later than every batch up to T0 + 10 s
    now[0] = T0 + 11 * SECOND
    assert [counted(p.plan(T0 + n * SECOND, SECOND)) for n in range(1, 11)] == [[0, 0]] * 10
    assert meta.asked == 1
    assert spans(p.plan(T0 + 11 * SECOND, SECOND)) == [("a", 0, 5, 8), ("b", 0, 0, 0)]
    assert meta.asked == 2


def test_a_plan_that_could_not_read_a_partition_proves_nothing() -> None:
    meta = AskCounter(marks={("a", 0): (0, 5), ("b", 0): (0, 0)}, unreadable={("b", 0)})
    p = down_time_planner(meta, [T0 + 10 * SECOND], rate=None)
    p.plan(T0, SECOND)
    p.plan(T0 + SECOND, SECOND)
    assert meta.asked == 2


def test_without_a_wall_clock_every_plan_asks_the_brokers() -> None:
    meta = AskCounter(marks={("a", 0): (0, 5), ("b", 0): (0, 0)})
    p = planner(meta)
    for n in range(3):
        p.plan(T0 + n * SECOND, SECOND)
    assert meta.asked == 3


def test_resume_forgets_what_an_earlier_plan_proved() -> None:
    meta = AskCounter(marks={("a", 0): (0, 5), ("b", 0): (0, 0)})
    p = down_time_planner(meta, [T0 + 10 * SECOND], rate=None)
    p.plan(T0, SECOND)
    p.resume({("a", 0): 2, ("b", 0): 0})
    assert spans(p.plan(T0 + SECOND, SECOND)) == [("a", 0, 2, 5), ("b", 0, 0, 0)]


# --- data loss ---------------------------------------------------------------------------------


def test_data_loss_fails_naming_topic_partition_and_offsets(meta: FakeMetadata) -> None:
    p = planner(meta, rate=10.0)
    p.plan(T0, SECOND)  # a-0 now at 10
    meta.delete_before(("a", 0), 25)
    with pytest.raises(DataLoss, match=r"\[10, 25\) of a-0 .*15 offsets"):
        p.plan(T0 + SECOND, SECOND)
    assert p.positions()[("a", 0)] == 10  # a failed plan changes nothing


def test_data_loss_skip_moves_on_counts_and_logs(
    meta: FakeMetadata, caplog: pytest.LogCaptureFixture
) -> None:
    p = planner(meta, rate=10.0, fail_on_data_loss=False)
    p.plan(T0, SECOND)
    meta.delete_before(("a", 0), 25)
    meta.delete_before(("a", 1), 24)
    with caplog.at_level(logging.WARNING, logger="connectors.planner"):
        ranges = p.plan(T0 + SECOND, SECOND)
    assert spans(ranges)[:2] == [("a", 0, 25, 35), ("a", 1, 24, 34)]
    assert p.lost_offsets_total == 15 + 4
    assert p.lost_offsets() == {("a", 0): 15, ("a", 1): 4}
    assert "[10, 25) of a-0" in caplog.text


def test_starting_offset_already_deleted_is_data_loss(meta: FakeMetadata) -> None:
    starting = StartingOffsets.explicit({("a", 1): 2})
    with pytest.raises(DataLoss, match=r"\[2, 10\) of a-1"):
        planner(meta, starting).plan(T0, SECOND)


def test_offsets_going_backwards_is_data_loss_or_a_reread(meta: FakeMetadata) -> None:
    p = planner(meta)
    p.plan(T0, SECOND)
    meta.marks[("a", 0)] = (0, 8)  # deleted and re-created, 8 new records
    with pytest.raises(DataLoss, match="a-0 ends at offset 8 .* start at 100: .*re-created"):
        p.plan(T0 + SECOND, SECOND)
    p = planner(meta, fail_on_data_loss=False)
    p.resume({("a", 0): 100})
    assert spans(p.plan(T0 + SECOND, SECOND))[0] == ("a", 0, 0, 8)


def test_lso_below_earliest_gives_an_empty_range_not_an_error() -> None:
    meta = FakeMetadata(marks={("a", 0): (50, 40)})  # a hanging transaction held the LSO back
    p = planner(meta, topics=["a"], fail_on_data_loss=False)
    p.resume({("a", 0): 30})
    assert spans(p.plan(T0, SECOND)) == [("a", 0, 50, 50)]


# --- configuration and determinism -------------------------------------------------------------


def test_exactly_one_of_topics_or_pattern(meta: FakeMetadata) -> None:
    with pytest.raises(ConfigError, match="exactly one"):
        OffsetPlanner(meta, starting=StartingOffsets.earliest())
    with pytest.raises(ConfigError, match="exactly one"):
        OffsetPlanner(meta, topics=["a"], pattern="a", starting=StartingOffsets.earliest())
    with pytest.raises(ConfigError, match=r"use \['a'\]"):
        OffsetPlanner(meta, topics="a", starting=StartingOffsets.earliest())


def test_plans_are_deterministic_and_sorted(meta: FakeMetadata) -> None:
    meta.marks[("a", 10)] = (0, 5)
    meta.marks[("a", 2)] = (0, 5)
    first = planner(meta, rate=7.0).plan(T0, SECOND)
    again = planner(meta, rate=7.0).plan(T0, SECOND)
    assert first == again
    assert [r.topic_partition for r in first] == sorted(r.topic_partition for r in first)
    assert [r.partition for r in first] == [0, 1, 2, 10, 0]


# --- split_ranges ------------------------------------------------------------------------------


def covered(ranges: list[OffsetRange]) -> dict[tuple[str, int], list[int]]:
    offsets: dict[tuple[str, int], list[int]] = {}
    for r in ranges:
        if r.count:
            offsets.setdefault(r.topic_partition, []).extend(range(r.from_offset, r.until_offset))
    return offsets


def test_split_keeps_ranges_whole_when_there_are_enough() -> None:
    ranges = [OffsetRange("a", 1, 0, 1000), OffsetRange("a", 0, 0, 10)]
    assert split_ranges(ranges, 2) == sorted(ranges)


def test_split_cuts_large_ranges_and_leaves_small_ones() -> None:
    big, small = OffsetRange("a", 0, 0, 900), OffsetRange("a", 1, 500, 600)
    pieces = split_ranges([small, big], 8)
    assert len(pieces) >= 8
    assert [r for r in pieces if r.partition == 1] == [small]
    assert covered(pieces) == covered([big, small])
    assert pieces == sorted(pieces)
    assert max(r.count for r in pieces) - min(r.count for r in pieces if r.partition == 0) <= 1


def test_split_drops_empty_ranges_and_stops_at_single_offsets() -> None:
    ranges = [OffsetRange("a", 0, 5, 5), OffsetRange("b", 0, 0, 3)]
    assert split_ranges(ranges, 10) == [
        OffsetRange("b", 0, 0, 1),
        OffsetRange("b", 0, 1, 2),
        OffsetRange("b", 0, 2, 3),
    ]
    assert split_ranges([OffsetRange("a", 0, 5, 5)], 4) == []


@pytest.mark.parametrize("min_partitions", [0, 1, 2, 3, 5, 7, 16, 100])
def test_split_covers_exactly_the_input_and_reaches_the_minimum(min_partitions: int) -> None:
    ranges = [OffsetRange("a", p, 10 * p, 10 * p + n) for p, n in enumerate([1, 17, 40, 3, 0])]
    pieces = split_ranges(ranges, min_partitions)
    assert covered(pieces) == covered(ranges)
    assert len(pieces) >= min(min_partitions, sum(r.count for r in ranges))
    assert pieces == split_ranges(list(reversed(ranges)), min_partitions)


# --- pack_ranges -------------------------------------------------------------------------------


@given(
    counts=st.lists(st.integers(min_value=1, max_value=1000), min_size=1, max_size=12),
    max_groups=st.integers(min_value=1, max_value=16),
)
def test_packing_keeps_every_piece_once_in_at_most_max_groups(
    counts: list[int], max_groups: int
) -> None:
    pieces = sorted(OffsetRange("a", p, 0, n) for p, n in enumerate(counts))
    groups = pack_ranges(pieces, max_groups)
    assert len(groups) == min(max_groups, len(pieces))
    assert sorted(r for group in groups for r in group) == pieces
    assert all(group == sorted(group) and group for group in groups)
    assert groups == pack_ranges(list(pieces), max_groups)  # a replay packs the same way
    totals = [sum(r.count for r in group) for group in groups]
    # Largest first to the lightest group: no group exceeds another by more than one piece.
    assert max(totals) - min(totals) <= max(counts)


def test_packing_is_one_piece_per_group_without_a_maximum() -> None:
    pieces = [OffsetRange("a", p, 0, 10) for p in range(3)]
    assert pack_ranges(pieces, None) == [[r] for r in pieces]


def test_partition_bounds_name_the_problem() -> None:
    assert partition_bounds_problem(2, None) is None
    assert partition_bounds_problem(2, 2) is None
    problem = partition_bounds_problem(4, 2)
    assert problem is not None
    assert "max_partitions (2) is below min_partitions (4)" in problem


@pytest.mark.parametrize(
    "code",
    [
        KafkaError._TIMED_OUT,
        KafkaError._ALL_BROKERS_DOWN,
        KafkaError._UNKNOWN_PARTITION,
        KafkaError._DESTROY_BROKER,
        KafkaError.NOT_LEADER_FOR_PARTITION,
    ],
)
def test_failover_errors_are_waited_out(code: int) -> None:
    assert is_transient(KafkaError(code))


@pytest.mark.parametrize(
    "code",
    [KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError._AUTHENTICATION, KafkaError._INVALID_ARG],
)
def test_errors_no_wait_can_cure_stop_the_planner(code: int) -> None:
    assert not is_transient(KafkaError(code))


def test_fatal_errors_stop_the_planner() -> None:
    assert not is_transient(KafkaError(KafkaError._FATAL, fatal=True))
