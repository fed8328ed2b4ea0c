"""Ten million keys of running totals in a state on disk (`update_state_on_disk`) on this
machine's real Spark: the keys are loaded, then batches touch 1% of them each; the memory of the
whole process tree (this process, Spark's JVM, its Python workers) adds at most a fixed bound to
what it held before the first batch and does not grow with the keys, and every key's total is
exact.

The keys are made on the executors (each batch's queue holds only seeds), so neither the input
nor the output passes through the driver's memory: what is measured is the state's. `make soak`
runs it at 10,000,000 keys; `make test` at 200,000, to keep the path exercised.
"""

from __future__ import annotations

import random
import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from examples.running_totals_on_disk import add_to_total
from service.driver.checkpoints import StateCheckpoints
from service.driver.lifecycle import BatchLifecycle
from service.driver.recovery import JournalLog, recover
from service.graph.checkpoint_store import CheckpointStore
from service.graph.context import StreamingContext
from service.graph.disk_state import DiskKeyedState
from service.journal.file import FileJournal
from service.testing import FIRST_BATCH_MS, INTERVAL_MS
from tests.soak import sized

KEYS = sized(200_000, 10_000_000)
PARTITIONS = 8
SEEDS_PER_BATCH = 8
"""Tasks that make each batch's keys."""
LOAD_BATCHES = sized(4, 20)
TOUCH_BATCHES = 10
TOUCHED = KEYS // 100
CHECKPOINT_EVERY = 5
MEMORY_BOUND = 2 * 1024**3
"""What the whole process tree's resident memory may add to what it held before the first batch
(this pytest process and the session's Spark, which earlier tests of a suite have grown); the
soak run prints what it measured."""
GROWTH_BOUND = 256 * 1024**2
"""What the tree's peak memory may grow from the first half of the load to the rest of the run,
while the keys double (in memory, 5,000,000 more keys would take well over 500 MiB)."""


def key(number: int) -> str:
    return f"k{number:08d}"


def keys_of(seed: tuple[int, int]) -> Iterator[tuple[str, int]]:
    """Batch `index`'s keys made by task `part`: a slice of the vocabulary while loading, then
    `TOUCHED / SEEDS_PER_BATCH` keys drawn from all of it."""
    index, part = seed
    if index < LOAD_BATCHES:
        per_batch = KEYS // LOAD_BATCHES
        start = index * per_batch + part * per_batch // SEEDS_PER_BATCH
        end = index * per_batch + (part + 1) * per_batch // SEEDS_PER_BATCH
        for number in range(start, end):
            yield (key(number), 1)
        return
    rng = random.Random(index * 1000 + part)
    for _ in range(TOUCHED // SEEDS_PER_BATCH):
        yield (key(rng.randrange(KEYS)), 1)


def expected_touches() -> Counter[str]:
    touched: Counter[str] = Counter()
    for index in range(LOAD_BATCHES, LOAD_BATCHES + TOUCH_BATCHES):
        for part in range(SEEDS_PER_BATCH):
            touched.update(k for k, _ in keys_of((index, part)))
    return touched


class TreeMemory(threading.Thread):
    """Samples the summed resident memory of this process and its descendants."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.samples: list[int] = []
        self._done = threading.Event()

    def run(self) -> None:
        while not self._done.wait(0.5):
            self.samples.append(tree_rss())

    def stop(self) -> None:
        self._done.set()
        self.join()


def tree_rss(root: int | None = None) -> int:
    import os

    pids = [root or os.getpid()]
    children: dict[int, list[int]] = {}
    for status in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = status.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(status.parent.name))
    total = 0
    while pids:
        pid = pids.pop()
        pids += children.get(pid, [])
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1]) * 1024
        except OSError:
            continue
    return total


def test_ten_million_keys_stay_within_a_memory_bound_and_are_exact(sc: Any, tmp_path: Path) -> None:
    batches = [
        [(index, part) for part in range(SEEDS_PER_BATCH)]
        for index in range(LOAD_BATCHES + TOUCH_BATCHES)
    ]
    ctx = StreamingContext(sc, "large", INTERVAL_MS, PARTITIONS)
    pairs = ctx.queue_stream(batches).flat_map(keys_of)
    totals = pairs.update_state_on_disk(add_to_total, PARTITIONS).queryable("totals")
    changed: list[int] = []
    totals.foreach_batch(lambda rdd, _t: changed.append(rdd.count()), "count")
    journal = FileJournal(tmp_path / "journal")
    epoch = journal.open()
    log = JournalLog(journal, epoch, ctx.graph_json())
    store = CheckpointStore(tmp_path / "checkpoints")
    ctx.place_state(store.files, tmp_path / "local")
    lifecycle = BatchLifecycle(
        ctx, log, checkpoints=StateCheckpoints(ctx, store, log, CHECKPOINT_EVERY)
    )
    lifecycle.setup_outputs()
    recover(ctx, journal, lifecycle, epoch)
    ctx.queries.open()
    memory = TreeMemory()
    before = tree_rss()
    memory.start()
    try:
        for index in range(len(batches)):
            lifecycle.run_new(FIRST_BATCH_MS + index * INTERVAL_MS)
            memory.samples.append(tree_rss())
            if index == LOAD_BATCHES // 2 - 1:
                half_loaded = len(memory.samples)
    finally:
        memory.stop()
    touched = expected_touches()
    assert changed == [KEYS // LOAD_BATCHES] * LOAD_BATCHES + [
        len(set(keys_of_batch(i))) for i in range(LOAD_BATCHES, len(batches))
    ]
    (stream,) = ctx.stateful_streams()
    assert isinstance(stream.computation, DiskKeyedState)
    assert stream.computation.local_keys() == KEYS
    rng = random.Random(1)
    for number in [rng.randrange(KEYS) for _ in range(300)] + [int(k[1:]) for k in touched][:300]:
        found = ctx.queries.lookup("totals", key(number))
        assert found.value == 1 + touched[key(number)], key(number)
    first, rest = memory.samples[:half_loaded], memory.samples[half_loaded:]
    peak, grown = max(memory.samples), max(rest) - max(first)
    print(
        f"{KEYS:,} keys: process tree peak {peak / 1024**2:,.0f} MiB, "
        f"{before / 1024**2:,.0f} MiB before the first batch, "
        f"{max(first) / 1024**2:,.0f} MiB with half the keys loaded; "
        f"stores {folder_size(tmp_path / 'local') / 1024**2:,.0f} MiB"
    )
    assert peak - before <= MEMORY_BOUND, f"peak {peak:,} bytes, {before:,} before"
    assert grown <= GROWTH_BOUND, f"grew {grown:,} bytes while the keys doubled"


def keys_of_batch(index: int) -> Iterator[str]:
    for part in range(SEEDS_PER_BATCH):
        yield from (k for k, _ in keys_of((index, part)))


def folder_size(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())
