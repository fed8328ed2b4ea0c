"""Each batch's state and each incremental window are computed once: the RDDs a later batch is
computed from stay persisted until a job has materialized their successor, so Spark never
recomputes a chain of earlier batches (through checkpoints too).

Counted with accumulators inside the user functions, so the test asserts amounts of work, never
time.
"""

from __future__ import annotations

import operator
from functools import partial
from pathlib import Path
from typing import Any

from service.driver.checkpoints import StateCheckpoints
from service.driver.lifecycle import BatchLifecycle
from service.graph.checkpoint_store import CheckpointStore
from service.graph.context import StreamingContext
from service.testing import FIRST_BATCH_MS, INTERVAL_MS
from sinks.memory import MemorySink

BATCHES = 12
CHECKPOINT_EVERY = 5
WINDOW_BATCHES = 3
KEYS = ("a", "b")


def counted_total(calls: Any, values: list[int], state: int | None) -> int:
    calls.add(1)
    return (state or 0) + sum(values)


def counted_subtract(calls: Any, left: int, right: int) -> int:
    calls.add(1)
    return left - right


def tagged(name: str, row: Any) -> tuple[str, Any]:
    return (name, row)


def test_state_and_incremental_windows_are_computed_once_per_batch(sc: Any, tmp_path: Path) -> None:
    updates, inversions = sc.accumulator(0), sc.accumulator(0)
    ctx = StreamingContext(sc, "work", INTERVAL_MS, 2)
    pairs = ctx.queue_stream([[(key, 1) for key in KEYS]] * BATCHES)
    totals = pairs.update_state_by_key(partial(counted_total, updates))
    windows = pairs.reduce_by_key_and_window(
        operator.add,
        partial(counted_subtract, inversions),
        length_ms=WINDOW_BATCHES * INTERVAL_MS,
    )
    sink = MemorySink()
    totals.map(partial(tagged, "totals")).union(windows.map(partial(tagged, "windows"))).write(
        "out", sink
    )
    store = CheckpointStore(tmp_path / "checkpoints")
    lifecycle = BatchLifecycle(
        ctx, None, checkpoints=StateCheckpoints(ctx, store, None, CHECKPOINT_EVERY)
    )
    lifecycle.setup_outputs()
    for index in range(BATCHES):
        lifecycle.run_new(FIRST_BATCH_MS + index * INTERVAL_MS)

    # Every key has state or new values in every batch: one update call per key and batch.
    assert updates.value == len(KEYS) * BATCHES
    # From the first batch that leaves a window on, each key's leaving value is subtracted once.
    assert inversions.value == len(KEYS) * (BATCHES - WINDOW_BATCHES)
    last = sink.batches("out")[-1]
    assert sorted(row for name, row in last if name == "totals") == [("a", 12), ("b", 12)]
    assert sorted(row for name, row in last if name == "windows") == [("a", 3), ("b", 3)]


def test_a_quiet_window_is_found_empty_once_then_costs_no_job(sc: Any) -> None:
    """After an outage the down-time boundaries of a window with nothing left in it must be
    cheap: a window that no batch entered or left is the previous one, a job finds it empty
    once, and every boundary after that runs no Spark job at all."""
    from service.graph.state_functions import count_is_not_zero

    ctx = StreamingContext(sc, "quiet", INTERVAL_MS, 2)
    pairs = ctx.queue_stream([[("a", 1), ("b", 2)], [("a", 1)]])  # then empty batches
    windows = pairs.reduce_by_key_and_window(
        operator.add, operator.sub, length_ms=2 * INTERVAL_MS, filter_fn=count_is_not_zero
    )
    sink = MemorySink()
    windows.write("out", sink)
    lifecycle = BatchLifecycle(ctx, None)
    lifecycle.setup_outputs()
    jobs_outside_outputs, output_jobs = [], []
    for index in range(8):
        group = f"quiet-{index}"
        sc.setJobGroup(group, "steps the window")  # the outputs' jobs run in groups of their own
        outcome = lifecycle.run_new(FIRST_BATCH_MS + index * INTERVAL_MS)
        jobs_outside_outputs.append(len(sc.statusTracker().getJobIdsForGroup(group)))
        output_jobs.append(len(outcome.outputs[0].jobs))

    assert [sorted(rows) for rows in sink.batches("out")] == [
        [("a", 1), ("b", 2)],
        [("a", 2), ("b", 2)],
        [("a", 1)],  # batch 0 left
        [],  # batch 1 left: computed by a job, all filtered out
        [],  # nothing entered or left: the previous window, found empty by one job
        [],
        [],
        [],
    ]
    assert output_jobs[:4] == [1, 1, 1, 1]
    assert output_jobs[4:] == [0, 0, 0, 0]
    assert jobs_outside_outputs[4:] == [1, 0, 0, 0]
