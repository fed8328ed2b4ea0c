"""A keyed state on disk (`update_state_on_disk`) on a real Spark with a real file journal: every
batch's changes equal a plain-Python model's, across drivers that stop before a batch, after a
batch's tasks committed but before it completed, and after the executors' local stores were
lost; live queries read the state as of the last completed batch."""

from __future__ import annotations

import random
import shutil
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from service.cli.checkpoint import checkpoint
from service.graph import functions
from service.graph.context import StreamingContext
from service.graph.disk_state import DiskKeyedState
from service.graph.disk_store import LocalStore
from service.testing import FIRST_BATCH_MS, INTERVAL_MS
from sinks.memory import MemorySink
from tests.spark import test_state_recovery as recovery

SNAPSHOT_EVERY = 4
TTL_MS = 3 * INTERVAL_MS
WORDS = "abcdefghij"


def capped_total(values: list[int], state: int | None) -> int | None:
    """A running total that removes its key when it reaches a multiple of 5."""
    total = (state or 0) + sum(values)
    return None if total % 5 == 0 else total


def make_input(seed: int, batches: int) -> list[list[str]]:
    rng = random.Random(seed)
    return [
        [" ".join(rng.choices(WORDS, k=rng.randint(1, 5))) for _ in range(rng.randint(0, 3))]
        for _ in range(batches)
    ]


def model(
    lines: list[list[str]], ttl_ms: int | None
) -> tuple[list[list[tuple[Any, Any]]], list[dict[Any, int]]]:
    """Each batch's changes, and the state after each batch, by plain Python."""
    state: dict[Any, tuple[int, int]] = {}
    changes: list[list[tuple[Any, Any]]] = []
    states: list[dict[Any, int]] = []
    for index, batch in enumerate(lines):
        t = FIRST_BATCH_MS + index * INTERVAL_MS
        news: dict[Any, list[int]] = {}
        for line in batch:
            for word in line.split():
                news.setdefault(keyed(word), []).append(1)
        changed: list[tuple[Any, Any]] = []
        for key, values in news.items():
            old = state.get(key)
            new = capped_total(values, None if old is None else old[0])
            if new is None:
                if state.pop(key, None) is not None:
                    changed.append((key, None))
            else:
                state[key] = (new, t)
                changed.append((key, new))
        if ttl_ms is not None:
            for key, (_, touched) in list(state.items()):
                if key not in news and touched <= t - ttl_ms:
                    del state[key]
                    changed.append((key, None))
        changes.append(sorted(changed, key=repr))
        states.append({key: value for key, (value, _) in state.items()})
    return changes, states


def keyed(word: str) -> Any:
    """Some keys are tuples, which the store keeps as tagged JSON."""
    return (word, len(word)) if word in "ij" else word


def graph(
    ctx: StreamingContext,
    lines: list[list[str]],
    sink: MemorySink,
    ttl: int | None,
    partitions: int = 3,
) -> None:
    pairs = ctx.queue_stream(lines).flat_map(str.split).map(keyed).map(functions.pair_with_one)
    state = pairs.update_state_on_disk(
        capped_total, partitions, ttl_ms=ttl, snapshot_every_batches=SNAPSHOT_EVERY
    )
    state.queryable("totals").write("changes", sink)


class Driver(recovery.Driver):
    """`test_state_recovery`'s driver of the disk state's graph, which also answers queries."""

    def recover(self) -> int:
        recomputed = super().recover()
        self.ctx.queries.open()
        return recomputed

    def run_tasks_only(self, index: int) -> None:
        """Journals batch `index` as planned and runs its state's tasks, then dies: the local
        stores and the durable changes hold a batch the journal never saw completed."""
        plan = self.lifecycle.plan(FIRST_BATCH_MS + index * INTERVAL_MS)
        self.lifecycle.journal_planned(plan)
        (stream,) = self.ctx.stateful_streams()
        stream.rdd_at(plan).count()


def start(
    sc: Any,
    workdir: Path,
    lines: Any,
    sink: MemorySink,
    ttl: int | None = None,
    partitions: int = 3,
) -> Driver:
    """A driver of `graph` over `workdir`'s journal, checkpoints and stores."""
    return Driver(sc, workdir, lines, sink, partial(graph, ttl=ttl, partitions=partitions))


def written(sink: MemorySink, batches: int) -> list[list[tuple[Any, Any]]]:
    return [
        sorted(sink.batch_rows("changes", FIRST_BATCH_MS + i * INTERVAL_MS), key=repr)
        for i in range(batches)
    ]


def test_changes_equal_the_model_and_queries_read_the_completed_batch(
    sc: Any, tmp_path: Path
) -> None:
    lines = make_input(3, 10)
    expected, states = model(lines, None)
    sink = MemorySink()
    driver = start(sc, tmp_path, lines, sink)
    driver.recover()
    driver.run(0, len(lines))
    assert written(sink, len(lines)) == expected
    final = states[-1]
    for word in WORDS:
        found = driver.ctx.queries.lookup("totals", keyed(word))
        assert found.batch_time == FIRST_BATCH_MS + (len(lines) - 1) * INTERVAL_MS
        assert (found.found, found.value) == (keyed(word) in final, final.get(keyed(word)))
    scanned = driver.ctx.queries.scan("totals", "", limit=100)
    assert dict(scanned.entries) == {k: v for k, v in final.items() if isinstance(k, str)}
    disk_state = driver.ctx.stateful_streams()[0].computation
    assert isinstance(disk_state, DiskKeyedState)
    assert disk_state.local_keys() == len(final)
    assert disk_state.local_bytes() > 0
    # A store that cannot be read counts none; the others are still counted.
    unreadable = disk_state.task().store_path(0)
    with LocalStore(unreadable, read_only=True) as store:
        lost = store.keys
    for leftover in unreadable.parent.glob(f"{unreadable.name}*"):
        leftover.unlink()
    unreadable.write_bytes(b"not a database")
    assert disk_state.local_keys() == len(final) - lost


@pytest.mark.parametrize("lose_local_stores", [False, True])
def test_a_new_driver_carries_on_exactly_after_a_batch_ran_but_never_completed(
    sc: Any, tmp_path: Path, lose_local_stores: bool
) -> None:
    lines = make_input(7, 14)
    expected, _ = model(lines, TTL_MS)
    sink = MemorySink()
    first = start(sc, tmp_path, lines, sink, TTL_MS)
    first.recover()
    first.run(0, 8)  # checkpoints after batches 2 and 5; 6 and 7 only journaled completed
    first.run_tasks_only(8)
    if lose_local_stores:
        shutil.rmtree(tmp_path / "local")  # rebuilt from the durable snapshots and changes
    second = start(sc, tmp_path, lines, sink, TTL_MS)
    assert second.recover() == 2
    second.run(9, 3)
    second.plan_only(12)
    third = start(sc, tmp_path, lines, sink, TTL_MS)
    third.recover()
    third.run(13, 1)
    assert written(sink, len(lines)) == expected


def test_old_durable_changes_are_pruned_behind_snapshots(sc: Any, tmp_path: Path) -> None:
    lines = make_input(11, 16)
    sink = MemorySink()
    driver = start(sc, tmp_path, lines, sink)
    driver.recover()
    driver.run(0, len(lines))
    folders = sorted((tmp_path / "checkpoints" / "disk-state").glob("*/*/p00000/*"))
    times = [int(folder.name) for folder in folders]
    assert times, "the state published no changes"
    assert min(times) > FIRST_BATCH_MS, "nothing was pruned"
    assert any((folder / "snapshot").exists() for folder in folders)


def test_a_state_on_disk_rescales_from_3_to_5_and_back_exactly(sc: Any, tmp_path: Path) -> None:
    """3 -> 5 -> 3 -> 5 partitions across deaths. A batch that ran but never completed is
    finished in the count it began in, then every key moves into the new count (a new lineage
    from a snapshot per partition). The second driver dies before any checkpoint in 5, so the
    third restores a checkpoint in 3 while the journal's last batches want 5: the state moves
    to 5 for them, then back to 3. The stores are lost before the fourth start."""
    lines = make_input(19, 16)
    expected, states = model(lines, TTL_MS)
    sink = MemorySink()
    first = start(sc, tmp_path, lines, sink, TTL_MS, partitions=3)
    first.recover()
    first.run(0, 6)  # checkpoints after batches 2 and 5
    first.run_tasks_only(6)
    second = start(sc, tmp_path, lines, sink, TTL_MS, partitions=5)
    second.recover()
    second.run(7, 1)
    second.plan_only(8)
    third = start(sc, tmp_path, lines, sink, TTL_MS, partitions=3)
    third.recover()
    third.run(9, 3)
    third.plan_only(12)
    shutil.rmtree(tmp_path / "local")
    fourth = start(sc, tmp_path, lines, sink, TTL_MS, partitions=5)
    fourth.recover()
    fourth.run(13, 3)
    assert written(sink, len(lines)) == expected
    final = states[-1]
    for word in map(keyed, WORDS):
        found = fourth.ctx.queries.lookup("totals", word)
        assert (found.found, found.value) == (word in final, final.get(word))
    lineages = [p.name for p in (tmp_path / "checkpoints" / "disk-state").glob("*/*")]
    origins = {int(name.split("-of-")[0]) for name in lineages if name.endswith("-of-5")}
    assert max(origins) > FIRST_BATCH_MS, f"no lineage of 5 started by a rescale: {lineages}"


def test_checkpoint_show_prints_a_keys_state_as_of_each_checkpoint(sc: Any, tmp_path: Path) -> None:
    lines = make_input(17, 11)
    _, states = model(lines, None)
    driver = start(sc, tmp_path, lines, MemorySink())
    driver.recover()
    driver.run(0, len(lines))  # checkpoints after batches 2, 5 and 8; 5 and 8 are retained
    args = ["--path", str(tmp_path / "checkpoints"), "--file", str(tmp_path / "journal")]
    for word, typed in [("a", "a"), ("c", "c"), (("i", 1), "('i', 1)"), ("z", "z")]:
        shown = CliRunner().invoke(checkpoint, ["show", *args, "--key", typed])
        assert shown.exit_code == 0, shown.output
        answers = [
            line.split(": ", 1)[1] for line in shown.output.splitlines() if "on disk" in line
        ]
        expected = [
            f"key {word!r} = {states[index][word]!r}"
            if word in states[index]
            else f"no key {typed!r}"
            for index in (5, 8)
        ]
        assert answers == expected, shown.output
