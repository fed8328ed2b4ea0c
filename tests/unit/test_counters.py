"""Typed counter keys: they pickle, never collide, and the accumulator adds them up."""

from __future__ import annotations

import pickle

from service.graph.counters import (
    CountersParam,
    DecodeErrors,
    EarliestTimestamp,
    InputRecords,
    LatestTimestamp,
    is_timestamp,
    record_timestamps,
    total_decode_errors,
    total_records,
)


def test_counter_keys_pickle_and_stay_distinct() -> None:
    keys = [InputRecords("t", 0), InputRecords("t", 1), DecodeErrors("t")]
    assert pickle.loads(pickle.dumps(keys)) == keys
    # The type is part of the key: no two kinds of counter can merge, nor with a plain tuple.
    assert len({*keys, ("t", 0), ("t",)}) == 5


def test_counters_param_merges_key_by_key_and_totals_add_up() -> None:
    param = CountersParam()
    left = param.zero({InputRecords("t", 0): 9})
    assert left == {}
    param.addInPlace(left, {InputRecords("t", 0): 3, DecodeErrors("t"): 1})
    param.addInPlace(left, {InputRecords("t", 0): 2, InputRecords("u", 1): 4})
    assert left == {InputRecords("t", 0): 5, InputRecords("u", 1): 4, DecodeErrors("t"): 1}
    assert total_records(left) == 9
    assert total_decode_errors(left) == 1
    assert total_records({}) == total_decode_errors({}) == 0


def test_timestamps_keep_the_earliest_and_latest_not_a_sum() -> None:
    param = CountersParam()
    left = param.zero({})
    param.addInPlace(left, {EarliestTimestamp("t", 0): 500, LatestTimestamp("t", 0): 900})
    # The same range read again (a second job, a retried task) changes nothing ...
    param.addInPlace(left, {EarliestTimestamp("t", 0): 500, LatestTimestamp("t", 0): 900})
    assert left == {EarliestTimestamp("t", 0): 500, LatestTimestamp("t", 0): 900}
    # ... and another piece of the partition widens the bounds.
    param.addInPlace(left, {EarliestTimestamp("t", 0): 450, LatestTimestamp("t", 0): 950})
    param.addInPlace(left, {InputRecords("t", 0): 4, EarliestTimestamp("u", 1): 100})
    assert record_timestamps(left) == (100, 950)
    assert total_records(left) == 4
    assert [is_timestamp(key) for key in sorted(left, key=str)][:1] == [True]
    assert record_timestamps({InputRecords("t", 0): 4}) is None
