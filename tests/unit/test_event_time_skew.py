"""A record whose event time is far ahead of the watermark (a producer clock set years ahead)
neither closes every window nor moves the watermark: beyond `max_skew_ms` it is a late record,
counted and dead-lettered. The merge of `service.graph.event_functions`, batch by batch over
several input partitions without Spark, equals the plain-Python model of tests/spark."""

from __future__ import annotations

import operator
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from service.graph import event_functions as ef
from service.graph.event_window import event_window_spec
from tests.spark import event_reference as reference

YEAR_MS = 365 * 24 * 3_600_000
SKEW_MS = 5000
LENGTH_MS = 1000


def event_ms(value: tuple[int, int]) -> int:
    return value[0]


def amount(value: tuple[int, int]) -> int:
    return value[1]


def spec(max_skew_ms: int = SKEW_MS) -> ef.EventWindowSpec:
    return event_window_spec(
        event_ms, operator.add, amount, LENGTH_MS, None, 0, 0, "dead_letter", max_skew_ms
    )


def run_merge(
    s: ef.EventWindowSpec, batches: list[list[list[Any]]]
) -> tuple[list[list[Any]], list[list[Any]], list[int | None], list[int]]:
    """Per batch: results, late records, the watermark and the late count, through one state
    partition fed by `tag_event_records` of each input partition."""
    state: list[Any] = []
    results, lates, marks, counts = [], [], [], []
    figures = Figures()
    for t, partitions in enumerate(batches, start=1):
        rows = list(state)
        for index, records in enumerate(partitions):
            rows += ef.tag_event_records(s.event_time, 1, index, records)
        merged = list(ef.merge_event_partition(s, t, figures, 0, rows))
        state = [row for row in merged if ef.is_window_state(row)]
        out = [tuple(r) for r in ef.emitted_in(t, ef.OUT, merged)]
        results.append(sorted(out, key=repr))
        lates.append(
            sorted(((r.key, r.value) for r in ef.emitted_in(t, ef.LATE, merged)), key=repr)
        )
        marks.append(figures.seen[t][0])
        counts.append(figures.seen[t][4])
    return results, lates, marks, counts


class Figures:
    def __init__(self) -> None:
        self.seen: dict[int, tuple[Any, ...]] = {}

    def add(self, figures: dict[int, tuple[Any, ...]]) -> None:
        self.seen.update(figures)


def test_one_record_years_ahead_is_a_counted_dead_letter_and_the_watermark_stays() -> None:
    future = (3_000 + 30 * YEAR_MS, 1)
    first = [[("a", (2000, 1))], [("a", (2500, 1))]]  # two input partitions
    results, lates, marks, counts = run_merge(
        spec(), [first, [[("a", future), ("a", (3200, 1))]], [[("b", (3300, 1))]]]
    )
    assert marks == [2500, 3200, 3300]
    assert counts == [0, 1, 0]
    assert lates == [[], [("a", future)], []]
    record = ef._late_record(spec(), "a", future, future[0], _part(3200))  # noqa: SLF001
    assert record.reason == (
        f"event time {future[0]} ms is too far ahead: more than {SKEW_MS} ms (the maximum skew) "
        "past the watermark 3200 ms; is the producer's clock wrong?"
    )
    # Windows close as the watermark of the records on time says, not all at once.
    assert results == [[], [("a", 2000, 3000, 2, 0)], []]


def _part(watermark: int) -> Any:
    part = ef._Partition()  # noqa: SLF001
    part.watermark = watermark
    return part


def test_without_a_watermark_yet_the_first_batch_sets_it() -> None:
    # Nothing to measure a skew against: the first batch's newest time is the watermark.
    _, _, marks, _ = run_merge(spec(), [[[("a", (YEAR_MS, 1))]], [[("a", (YEAR_MS + 9000, 1))]]])
    assert marks == [YEAR_MS, YEAR_MS]


def test_more_far_times_in_one_partition_than_a_mark_holds_lag_the_watermark_not_jump_it() -> None:
    far = [("a", (YEAR_MS + i, 1)) for i in range(ef.MARK_TIMES)]
    _, lates, marks, counts = run_merge(spec(), [[[("a", (1000, 1))]], [[("a", (1500, 1)), *far]]])
    assert marks == [1000, 1000]  # 1500 was taken, but its partition's MARK showed only far times
    assert counts == [0, ef.MARK_TIMES]
    assert len(lates[1]) == ef.MARK_TIMES


times = st.one_of(
    st.integers(0, 20_000), st.integers(YEAR_MS, YEAR_MS + 5), st.integers(20_000, 40_000)
)
records = st.tuples(st.sampled_from("ab"), st.tuples(times, st.integers(1, 3)))
batches = st.lists(
    st.lists(st.lists(records, max_size=4), min_size=1, max_size=3), min_size=1, max_size=6
)


@settings(max_examples=300, deadline=None)
@given(batches=batches, max_skew_ms=st.sampled_from([1, 2000, 10_000]))
def test_the_merge_equals_the_model_with_far_future_records(
    batches: list[list[list[Any]]], max_skew_ms: int
) -> None:
    model = reference.Model(event_ms, amount, operator.add, LENGTH_MS, LENGTH_MS, 0, 0, max_skew_ms)
    flat = [[r for part in batch for r in part] for batch in batches]
    expected_results, expected_lates = reference.run(model, flat)
    results, lates, _, counts = run_merge(spec(max_skew_ms), batches)
    assert results == expected_results
    assert lates == expected_lates
    assert sum(counts) == model.late_total
