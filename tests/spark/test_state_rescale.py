"""State's partition count changed between runs (keyed states and a keyed window), on a real
Spark with a real journal:
4 partitions, then 8 after a driver died mid-batch, then 4 again after another did. Recovery
runs each journaled batch in the count that planned it, so a batch whose first attempt wrote
some of its partitions is finished in the same partitions (the memory sink refuses a partition
written twice with different rows); new batches run in the new count; what is written equals
one uninterrupted run of the plain-Python reference model."""

from __future__ import annotations

import operator
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from service.errors import GraphChanged, SinkError
from service.graph import functions
from service.graph.context import StreamingContext
from service.graph.state_spec import StateSpec
from service.testing import FIRST_BATCH_MS, INTERVAL_MS
from sinks.base import BatchKey, WriteResult
from sinks.memory import MemorySink
from tests.spark.test_state_recovery import (
    SESSION_TIMEOUT_MS,
    WINDOW_MS,
    Driver,
    make_input,
    outputs_of,
    running_total,
    session,
    uninterrupted,
)


def scaled(
    ctx: StreamingContext,
    lines: list[list[str]],
    sink: MemorySink,
    *,
    states: int,
    counts: int | None = None,
) -> None:
    """The recovery tests' three stateful streams, all in `states` partitions; with `counts`,
    the pairs are first reduced per batch in that many (a stateless shuffle)."""
    pairs = ctx.queue_stream(lines).flat_map(str.split).map(functions.pair_with_one)
    if counts is not None:
        pairs = pairs.reduce_by_key(operator.add, counts)
    pairs.update_state_by_key(running_total, num_partitions=states).write("totals", sink)
    counts = pairs.reduce_by_key_and_window(
        operator.add, operator.sub, length_ms=WINDOW_MS, num_partitions=states
    )
    counts.write("windows", sink)
    spec = StateSpec(session, timeout_ms=SESSION_TIMEOUT_MS, num_partitions=states)
    pairs.map_with_state(spec).write("sessions", sink)


class DiesMidBatch(MemorySink):
    """Writes partition 0 of one batch's totals, then fails on partition 1: a driver that died
    half-way through a batch's output."""

    def __init__(self, batch_time: int) -> None:
        super().__init__()
        self.batch_time = batch_time
        self.armed = True

    def write(self, key: BatchKey, rows: Any) -> WriteResult:
        if self.armed and key.output == "totals" and key.batch_time == self.batch_time:
            if key.partition == 1:
                self.armed = False
                msg = "the driver died here"
                raise SinkError(msg)
        return super().write(key, rows)


def batch(index: int) -> int:
    return FIRST_BATCH_MS + index * INTERVAL_MS


def test_a_keyed_state_rescaled_at_each_restart_equals_an_uninterrupted_run(
    sc: Any, tmp_path: Path
) -> None:
    lines = make_input(11, 16)
    sink = DiesMidBatch(batch(7))
    run = tmp_path / "run"

    def driver(states: int) -> Driver:
        return Driver(sc, run, lines, sink, partial(scaled, states=states))

    first = driver(4)
    first.recover()
    first.run(0, 7)  # checkpoints after batches 2 and 5, in 4 partitions
    with pytest.raises(Exception, match="the driver died here"):
        first.run(7, 1)
    assert BatchKey("stateful", "totals", batch(7), 0) in sink.parts

    second = driver(8)
    assert second.recover() == 1  # batch 6 recomputed; 7 finished in the 4 partitions it began in
    assert sink.committed[("totals", batch(7))] == 4
    second.plan_only(8)  # planned in 8 partitions; the latest checkpoint has 4

    third = driver(4)
    # The 4-partition checkpoint moves into the journal's 8: batches 6 and 7 are recomputed,
    # 8 is replayed in 8 partitions (and checkpointed in 8), then the state moves into 4.
    assert third.recover() == 2
    assert sink.committed[("totals", batch(8))] == 8
    assert sink.committed[("sessions", batch(8))] == 8
    assert sink.committed[("windows", batch(8))] == 8
    third.run(9, 2)
    assert sink.committed[("totals", batch(9))] == 4
    third.plan_only(11)

    fourth = driver(8)
    assert fourth.recover() == 2  # the 8-partition checkpoint moves into 4 for batches 9 to 11
    assert sink.committed[("totals", batch(11))] == 4
    fourth.run(12, len(lines) - 12)
    assert sink.committed[("totals", batch(12))] == 8
    assert sink.committed[("windows", batch(12))] == 8
    assert outputs_of(sink) == uninterrupted(lines)


def test_a_stateless_shuffle_rescaled_is_refused_as_a_graph_change(sc: Any, tmp_path: Path) -> None:
    lines = make_input(12, 6)
    sink = MemorySink()
    first = Driver(sc, tmp_path / "run", lines, sink, partial(scaled, states=4, counts=2))
    first.recover()
    first.run(0, 2)
    second = Driver(sc, tmp_path / "run", lines, sink, partial(scaled, states=8, counts=4))
    with pytest.raises(GraphChanged, match="partitions 2 -> 4"):
        second.recover()
