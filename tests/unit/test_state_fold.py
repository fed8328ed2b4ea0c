"""Recovery's catch-up folds several batches of a keyed state in one pass
(`state_functions.fold_batches`); its records must be exactly those of merging the batches one
at a time, in the same order, for both state operators (timeouts and TTLs included)."""

from __future__ import annotations

from functools import partial
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from service.graph import state_functions as fn

pytestmark = pytest.mark.unit

INTERVAL_MS = 1000
KEYS = st.sampled_from("abcdef")
# A batch: the values of each input partition, in arrival order.
BATCH = st.lists(st.lists(st.tuples(KEYS, st.integers(-3, 9)), max_size=5), max_size=3)


def total_unless_negative(values: list[int], state: int | None) -> int | None:
    """Removes a key whose total falls below zero: exercises None from the update function."""
    total = (state or 0) + sum(values)
    return None if total < 0 else total


def count_sessions(batch_time: int, key: str, value: int | None, state: fn.State) -> Any:
    if state.is_timing_out():
        return (key, "closed", state.get())
    if value is not None and value < 0:
        state.remove()
        return (key, "removed")
    state.update((state.get() if state.exists() else 0) + 1)
    return (key, batch_time, value)


MERGES = {
    "update_state_by_key": partial(fn.update_state_partition, total_unless_negative, None),
    "update_state_by_key with a ttl": partial(
        fn.update_state_partition, total_unless_negative, 2 * INTERVAL_MS
    ),
    "map_with_state": partial(fn.map_with_state_partition, count_sessions, 2 * INTERVAL_MS),
}


def tagged(batch: list[list[tuple[str, int]]], batch_time: int | None) -> list[Any]:
    """The batch's values as the state's shuffle delivers them: input partition by partition."""
    rows: list[Any] = []
    for index, values in enumerate(batch):
        if batch_time is None:
            rows += fn.tag_new_values(index, values)
        else:
            rows += fn.tag_new_values_at(batch_time, index, values)
    return rows


def one_at_a_time(merge: Any, state: list[Any], batches: list[Any], times: list[int]) -> list[Any]:
    rows = list(state)
    for batch, t in zip(batches, times, strict=True):
        rows = list(merge(t, rows + tagged(batch, None)))
    return rows


def folded(merge: Any, state: list[Any], batches: list[Any], times: list[int]) -> list[Any]:
    news = [row for batch, t in zip(batches, times, strict=True) for row in tagged(batch, t)]
    # The shuffle may deliver the batches' values interleaved; each batch's keep their order.
    news.sort(key=lambda row: row[1][2] % 2)
    return list(fn.fold_batches(merge, tuple(times), [*state, *news]))


@settings(max_examples=200, deadline=None)
@given(
    kind=st.sampled_from(sorted(MERGES)),
    initial=st.dictionaries(KEYS, st.integers(0, 5), max_size=4),
    batches=st.lists(BATCH, min_size=1, max_size=6),
)
def test_folding_batches_equals_merging_them_one_at_a_time(
    kind: str, initial: dict[str, int], batches: list[Any]
) -> None:
    merge = MERGES[kind]
    state = [(key, (fn.KEEP, value, 0)) for key, value in initial.items()]
    times = [INTERVAL_MS * (i + 1) for i in range(len(batches))]
    assert folded(merge, state, batches, times) == one_at_a_time(merge, state, batches, times)


def test_a_key_idle_across_the_folded_batches_times_out_at_its_batch() -> None:
    merge = MERGES["map_with_state"]
    state = [("a", (fn.KEEP, 4, 0))]
    rows = list(fn.fold_batches(merge, (1000, 2000, 3000), state))
    # Timed out at 2000 (idle 2 intervals since 0): its closing record is gone by 3000.
    assert rows == []
    assert list(fn.fold_batches(merge, (1000, 2000), state)) == [
        ("a", (fn.OUTPUT, ("a", "closed", 4), 2000))
    ]
