"""The tasks of a keyed state on disk against a plain-Python model, without Spark: a partition's
batches run in order with replays, lost local stores and tasks that died between publishing
their changes and committing their store; queries as of an earlier batch read through what the
store kept; damaged or missing durable files are refused naming what to do."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from service.graph.checkpoint_files import LocalFiles
from service.graph.disk_changelog import DiskStateError, Lineage
from service.graph.disk_store import UNDO_BATCHES, LocalStore
from service.graph.disk_task import DiskStateTask, text_of
from service.graph.state_functions import tag_new_values

INTERVAL = 1000
TTL = 3 * INTERVAL
KEYS = ("a", "b", "c", ("t", 1), 7)


def capped(values: list[int], state: int | None) -> int | None:
    total = (state or 0) + sum(values)
    return None if total % 4 == 0 else total


def make_task(
    root: Path, ttl: int | None = TTL, snapshot_every: int = 3, keep_undo: bool = True
) -> DiskStateTask:
    lineage = Lineage(LocalFiles(root / "durable"), "s1-state", INTERVAL, 1)
    return DiskStateTask(lineage, str(root / "local"), capped, ttl, snapshot_every, keep_undo)


class Model:
    """What the state holds after each batch, and each batch's changes."""

    def __init__(self, ttl: int | None) -> None:
        self.ttl = ttl
        self.state: dict[Any, tuple[int, int]] = {}
        self.history: list[dict[Any, int]] = []

    def run(self, t: int, pairs: list[tuple[Any, int]]) -> list[tuple[Any, Any]]:
        news: dict[Any, list[int]] = {}
        for key, value in pairs:
            news.setdefault(key, []).append(value)
        changes: list[tuple[Any, Any]] = []
        for key, values in news.items():
            old = self.state.get(key)
            new = capped(values, None if old is None else old[0])
            if new is not None:
                self.state[key] = (new, t)
                changes.append((key, new))
            elif self.state.pop(key, None) is not None:
                changes.append((key, None))
        if self.ttl is not None:
            for key, (_, touched) in list(self.state.items()):
                if key not in news and touched <= t - self.ttl:
                    del self.state[key]
                    changes.append((key, None))
        self.history.append({k: v for k, (v, _) in self.state.items()})
        return changes


def run(task: DiskStateTask, t: int, previous: int | None, pairs: list[Any]) -> list[Any]:
    return list(task.run(t, previous, 0, tag_new_values(0, pairs)))


batches = st.lists(
    st.tuples(
        st.lists(st.tuples(st.sampled_from(KEYS), st.integers(1, 3)), max_size=6),
        st.sampled_from(["run", "replay", "lose-store", "died-before-commit"]),
    ),
    min_size=1,
    max_size=14,
)


@settings(max_examples=60, deadline=None)
@given(batches, st.booleans())
def test_every_batch_equals_the_model_whatever_happened_before(
    steps: list[tuple[list[tuple[Any, int]], str]], queried: bool
) -> None:
    with tempfile.TemporaryDirectory(prefix="dstreams-disk-state-") as folder:
        root = Path(folder)
        task = make_task(root, keep_undo=queried)
        model = Model(TTL)
        previous: int | None = None
        for index, (pairs, event) in enumerate(steps):
            t = INTERVAL * (index + 1)
            expected = model.run(t, pairs)
            if event == "died-before-commit":
                died_before_commit(task, t, previous, pairs)
            if event == "lose-store":
                shutil.rmtree(root / "local", ignore_errors=True)
            assert sorted(run(task, t, previous, pairs), key=repr) == sorted(expected, key=repr)
            if event == "replay":
                assert sorted(run(task, t, previous, []), key=repr) == sorted(expected, key=repr)
            previous = t
        with task.open(0) as store:
            assert store.keys == len(model.history[-1])


def died_before_commit(task: DiskStateTask, t: int, previous: int | None, pairs: list[Any]) -> None:
    """A task that published batch `t`'s changes and died before its store committed them."""
    news = dict.fromkeys(k for k, _ in pairs)
    opened = task._store_at(0, previous)  # noqa: SLF001 - the task's own first steps, stopped short
    try:
        tagged = {key: [e for k, e in tag_new_values(0, pairs) if k == key] for key in news}
        changes, _old = task._changes(opened, t, previous, tagged)  # noqa: SLF001 - likewise
        task.lineage.write_changes(0, changes)
    finally:
        opened.close()


def test_queries_read_through_what_later_batches_replaced(tmp_path: Path) -> None:
    task = make_task(tmp_path, ttl=None)
    model = Model(None)
    previous = None
    batches = 2 * UNDO_BATCHES + 3
    for index in range(batches):
        t = INTERVAL * (index + 1)
        pairs = [("a", 1), ("b", index % 3 + 1), (("t", 1), 1)] if index % 2 else [("c", 2)]
        model.run(t, pairs)
        run(task, t, previous, pairs)
        previous = t
    newest = INTERVAL * batches
    with LocalStore(task.store_path(0), read_only=True) as store:
        for index in range(batches - UNDO_BATCHES, batches):
            t = INTERVAL * (index + 1)
            assert store.can_answer(t)
            for key in KEYS:
                found = store.as_of(text_of(key), t)
                held = model.history[index].get(key)
                assert (None if found is None else int(found[0])) == held, (t, key)
            strings = {k: v for k, v in model.history[index].items() if isinstance(k, str)}
            low = text_of("")[:-1]
            scanned = store.range_as_of(low, low + "\U0010ffff", t, 10)
            assert {k.strip('"'): int(v) for k, v in scanned} == strings
        assert not store.can_answer(INTERVAL), "the store kept more batches than UNDO_BATCHES"
        assert not store.can_answer(newest + INTERVAL), "a batch the store has not reached"


def test_a_torn_changes_file_is_refused_naming_what_to_do(tmp_path: Path) -> None:
    task = make_task(tmp_path)
    run(task, INTERVAL, None, [("a", 1), ("b", 1)])
    changes = tmp_path / "durable" / task.lineage.batch_folder(0, INTERVAL) / "changes"
    changes.write_bytes(changes.read_bytes().rsplit(b"\n", 2)[0] + b"\n")
    with pytest.raises(DiskStateError, match="not a whole changes file.*restore the checkpoint"):
        task.lineage.read_changes(0, INTERVAL)


def test_a_missing_batch_in_the_chain_is_refused_naming_it(tmp_path: Path) -> None:
    task = make_task(tmp_path, snapshot_every=100)
    run(task, INTERVAL, None, [("a", 1)])
    run(task, 2 * INTERVAL, INTERVAL, [("b", 1)])
    shutil.rmtree(tmp_path / "durable" / task.lineage.batch_folder(0, INTERVAL))
    shutil.rmtree(tmp_path / "local")
    with pytest.raises(DiskStateError, match="changes of batch 1000 are missing"):
        run(task, 3 * INTERVAL, 2 * INTERVAL, [("c", 1)])


def test_changes_of_another_run_are_refused(tmp_path: Path) -> None:
    task = make_task(tmp_path)
    run(task, INTERVAL, None, [("a", 1)])
    run(task, 2 * INTERVAL, INTERVAL, [("a", 1)])
    with pytest.raises(DiskStateError, match="belongs to another run"):
        run(task, 2 * INTERVAL, None, [("a", 1)])


def test_pruning_keeps_what_a_rebuild_needs(tmp_path: Path) -> None:
    task = make_task(tmp_path, ttl=None, snapshot_every=3)
    model = Model(None)
    previous = None
    for index in range(10):
        t = INTERVAL * (index + 1)
        pairs = [(KEYS[index % len(KEYS)], 1)]
        model.run(t, pairs)
        run(task, t, previous, pairs)
        previous = t
    assert task.lineage.prune(keep_from=8 * INTERVAL) > 0
    shutil.rmtree(tmp_path / "local")
    t = 11 * INTERVAL
    assert run(task, t, previous, [("a", 1)]) == model.run(t, [("a", 1)])


def test_a_batch_committed_by_another_attempt_is_not_committed_twice(tmp_path: Path) -> None:
    task = make_task(tmp_path)
    run(task, INTERVAL, None, [("a", 1), ("b", 1)])
    with task.open(0) as store:
        changes = task.lineage.read_changes(0, INTERVAL)
        assert changes is not None
        store.commit(changes, {})  # a speculative copy that read the state before the first
        assert (store.version, store.keys) == (INTERVAL, 2)
