"""A long run of a stateful job with periodic checkpoints: the lineage and the driver's memory
stay bounded however many batches run (bounds on sizes, never on time)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from service.driver.checkpoints import StateCheckpoints
from service.driver.lifecycle import BatchLifecycle
from service.graph import functions
from service.graph.checkpoint_store import CheckpointStore
from service.graph.context import StreamingContext
from service.graph.dstream import StateView
from service.graph.state import KeyedState
from service.testing import FIRST_BATCH_MS, INTERVAL_MS
from sinks.memory import MemorySink

# 1,000 batches take several minutes here, so the suite runs 70 and `make soak` 1,000.
BATCHES = int(os.environ.get("DSTREAMS_LONG_RUN_BATCHES", "70"))
CHECKPOINT_EVERY = 10
# Measured from here on: two checkpoints in, the graph's Python objects and Spark's caches have
# reached their steady size (the floor below absorbs what is left of the warm-up).
WARM_UP = 20
# The debug string of a state RDD spans at most one checkpoint interval of merges; 10 batches
# of this graph print well under this. Without truncation it grows by ~1 KB per batch.
MAX_LINEAGE_CHARS = 40_000
# Python objects of the graph (RDD handles, plans) must not pile up. The bound grows with the
# batches measured (a leak of 48 KiB per batch fails the 1,000-batch soak run), with a floor for
# the allocator's noise over short runs.
RSS_GROWTH_PER_BATCH = 48 * 1024
RSS_GROWTH_FLOOR = 16 * 1024 * 1024


def running_total(values: list[int], state: int | None) -> int:
    return (state or 0) + sum(values)


def rss_bytes() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    pytest.skip("no /proc/self/status on this platform")
    return 0


@pytest.mark.timeout(3600)
def test_lineage_and_driver_memory_stay_bounded(sc: Any, tmp_path: Path) -> None:
    lines = [[f"w{(i * 7 + j) % 50} w{j}" for j in range(3)] for i in range(BATCHES)]
    # One partition: what grows or not is the chain of batches, not its width.
    ctx = StreamingContext(sc, "long", INTERVAL_MS, 1)
    pairs = ctx.queue_stream(lines).flat_map(str.split).map(functions.pair_with_one)
    totals = pairs.update_state_by_key(running_total)
    assert isinstance(totals, StateView)
    state = totals.state.computation
    assert isinstance(state, KeyedState)
    totals.changes().write("changes", MemorySink())
    store = CheckpointStore(tmp_path / "checkpoints")
    checkpoints = StateCheckpoints(ctx, store, None, CHECKPOINT_EVERY)
    lifecycle = BatchLifecycle(ctx, None, checkpoints=checkpoints)
    lifecycle.setup_outputs()
    lineage: list[int] = []
    rss_after_warm_up = 0
    for index in range(BATCHES):
        lifecycle.run_new(FIRST_BATCH_MS + index * INTERVAL_MS)
        state_rdd = state.latest
        lineage.append(len(state_rdd.toDebugString() or b""))
        if index == WARM_UP:
            rss_after_warm_up = rss_bytes()
    growth = rss_bytes() - rss_after_warm_up
    allowed = max(RSS_GROWTH_FLOOR, RSS_GROWTH_PER_BATCH * (BATCHES - WARM_UP))
    assert max(lineage) <= MAX_LINEAGE_CHARS, f"lineage grew to {max(lineage)} characters"
    # Flat, not merely bounded: the last three checkpoint intervals are no deeper than the
    # three after the warm-up.
    early = lineage[WARM_UP : WARM_UP + 3 * CHECKPOINT_EVERY]
    assert max(lineage[-3 * CHECKPOINT_EVERY :]) <= max(early) * 1.5
    assert growth <= allowed, f"driver RSS grew by {growth / 2**20:.1f} MiB"
    print(f"lineage max {max(lineage)} chars; RSS growth {growth / 2**20:.1f} MiB")
    assert len(store.batch_times()) <= 2  # old checkpoints deleted
