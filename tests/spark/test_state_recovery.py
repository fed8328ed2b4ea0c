"""Checkpoints and recovery with state, on a real Spark with a real file journal: a driver that
stops mid-run and a new one that recovers write exactly what one uninterrupted driver writes.

What an uninterrupted driver writes comes from the plain-Python reference model, which the
property tests (`test_state_properties`) hold every operator to, so each test runs Spark only for
the interrupted drivers."""

from __future__ import annotations

import json
import operator
import random
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from service.driver.checkpoints import StateCheckpoints, StateRecoveryError
from service.driver.lifecycle import BatchLifecycle
from service.driver.recovery import JournalLog, read_state, recover
from service.graph import functions
from service.graph.checkpoint_store import CheckpointStore
from service.graph.context import StreamingContext
from service.graph.state_spec import StateSpec
from service.journal.file import FileJournal
from service.testing import FIRST_BATCH_MS, INTERVAL_MS
from sinks.memory import MemorySink
from tests.spark import reference_model as model

OUTPUTS = ("totals", "windows", "sessions")
CHECKPOINT_EVERY = 3
WINDOW_MS = 3 * INTERVAL_MS
SESSION_TIMEOUT_MS = 2 * INTERVAL_MS


def running_total(values: list[int], state: int | None) -> int:
    return (state or 0) + sum(values)


def running_total_rewritten(values: list[int], state: int | None) -> int:
    """`running_total` with another body, as a fix released between two runs would be."""
    total = 0 if state is None else state
    for value in values:
        total += value
    return total


def session(batch_time: int, key: str, value: int | None, state: Any) -> Any:
    seen = state.get() if state.exists() else 0
    if state.is_timing_out():
        return (key, "closed", seen)
    state.update(seen + 1)
    return None


def make_input(seed: int, batches: int) -> list[list[str]]:
    rng = random.Random(seed)
    words = "abcdefgh"
    return [
        [" ".join(rng.choices(words, k=rng.randint(1, 4))) for _ in range(rng.randint(0, 3))]
        for _ in range(batches)
    ]


def side_by_side(ctx: StreamingContext, lines: list[list[str]], sink: MemorySink) -> None:
    """Three stateful streams that read only stateless ones: recovery folds each keyed state's
    recomputed batches into one pass (`StreamingContext.catch_up_stateful`)."""
    pairs = ctx.queue_stream(lines).flat_map(str.split).map(functions.pair_with_one)
    pairs.update_state_by_key(running_total).write("totals", sink)
    windows = pairs.reduce_by_key_and_window(operator.add, operator.sub, length_ms=WINDOW_MS)
    windows.write("windows", sink)
    sessions = pairs.map_with_state(StateSpec(session, timeout_ms=SESSION_TIMEOUT_MS))
    sessions.write("sessions", sink)


def side_by_side_rewritten(ctx: StreamingContext, lines: list[list[str]], sink: MemorySink) -> None:
    """`side_by_side` with the state's function changed in body and name, the graph the same."""
    pairs = ctx.queue_stream(lines).flat_map(str.split).map(functions.pair_with_one)
    pairs.update_state_by_key(running_total_rewritten).write("totals", sink)
    windows = pairs.reduce_by_key_and_window(operator.add, operator.sub, length_ms=WINDOW_MS)
    windows.write("windows", sink)
    sessions = pairs.map_with_state(StateSpec(session, timeout_ms=SESSION_TIMEOUT_MS))
    sessions.write("sessions", sink)


def chained(ctx: StreamingContext, lines: list[list[str]], sink: MemorySink) -> None:
    """A window over a keyed state's changes: the state cannot fold batches, since the window
    needs its RDD of every batch."""
    pairs = ctx.queue_stream(lines).flat_map(str.split).map(functions.pair_with_one)
    totals = pairs.update_state_by_key(running_total)
    totals.write("totals", sink)
    changes = totals.changes().reduce_by_key_and_window(
        operator.add, operator.sub, length_ms=WINDOW_MS
    )
    changes.write("windows", sink)
    sessions = totals.changes().map_with_state(StateSpec(session, timeout_ms=SESSION_TIMEOUT_MS))
    sessions.write("sessions", sink)


class Driver:
    """One driver's graph, journal and checkpoints over shared input, sink and folders."""

    def __init__(
        self,
        sc: Any,
        workdir: Path,
        lines: list[list[str]],
        sink: MemorySink,
        graph: Callable[[StreamingContext, list[list[str]], MemorySink], None] = side_by_side,
        store: CheckpointStore | None = None,
    ) -> None:
        self.ctx = StreamingContext(sc, "stateful", INTERVAL_MS, 2)
        graph(self.ctx, lines, sink)
        self.journal = FileJournal(workdir / "journal")
        self.epoch = self.journal.open()
        log = JournalLog(self.journal, self.epoch, self.ctx.graph_json())
        self.store = store or CheckpointStore(workdir / "checkpoints")
        self.ctx.place_state(self.store.files, workdir / "local")  # states on disk, if any
        self.checkpoints = StateCheckpoints(self.ctx, self.store, log, CHECKPOINT_EVERY)
        self.lifecycle = BatchLifecycle(self.ctx, log, checkpoints=self.checkpoints)
        self.lifecycle.setup_outputs()

    def recover(self) -> int:
        return recover(self.ctx, self.journal, self.lifecycle, self.epoch).recomputed_batches

    def run(self, first: int, count: int) -> None:
        for index in range(first, first + count):
            self.lifecycle.run_new(FIRST_BATCH_MS + index * INTERVAL_MS)

    def plan_only(self, index: int) -> None:
        """Journals batch `index` as planned and dies before running it."""
        plan = self.lifecycle.plan(FIRST_BATCH_MS + index * INTERVAL_MS)
        self.lifecycle.journal_planned(plan)


def outputs_of(sink: MemorySink) -> dict[str, list[list[Any]]]:
    return {name: [sorted(b, key=repr) for b in sink.batches(name)] for name in OUTPUTS}


def uninterrupted(lines: list[list[str]]) -> dict[str, Any]:
    """What one driver running every batch writes, per the reference model."""
    pairs = [[(word, 1) for line in batch for word in line.split()] for batch in lines]
    sessions, _snapshots = model.map_with_state(pairs, session, SESSION_TIMEOUT_MS)
    return {
        "totals": model.update_state_by_key(pairs, running_total),
        "windows": model.reduce_by_key_and_window(
            pairs, operator.add, operator.sub, WINDOW_MS, INTERVAL_MS
        ),
        "sessions": sessions,
    }


def test_recovery_recomputes_state_and_equals_an_uninterrupted_run(sc: Any, tmp_path: Path) -> None:
    lines = make_input(1, 12)
    expected = uninterrupted(lines)
    sink = MemorySink()
    first = Driver(sc, tmp_path / "run", lines, sink)
    first.recover()
    first.run(0, 8)  # checkpoints after batches 2 and 5; 6 and 7 are only in the journal
    first.plan_only(8)
    second = Driver(sc, tmp_path / "run", lines, sink)
    assert second.recover() == 2  # batches 6 and 7 recomputed; 8 replayed with its outputs
    second.run(9, len(lines) - 9)
    assert outputs_of(sink) == expected
    state = read_state(second.journal)
    assert [c.batch_time for c in state.retained_checkpoints][-1] == FIRST_BATCH_MS + 11_000
    # Only the retained checkpoints' files are left.
    kept = {c.batch_time for c in state.retained_checkpoints}
    assert set(second.store.batch_times()) <= kept


def test_a_changed_function_body_with_the_same_graph_recovers(sc: Any, tmp_path: Path) -> None:
    lines = make_input(5, 10)
    sink = MemorySink()
    first = Driver(sc, tmp_path / "run", lines, sink)
    first.recover()
    first.run(0, 6)  # checkpoints after batches 2 and 5
    first.plan_only(6)
    second = Driver(sc, tmp_path / "run", lines, sink, graph=side_by_side_rewritten)
    assert second.ctx.fingerprint() == first.ctx.fingerprint()
    second.recover()  # from the checkpoint of batch 5, then batch 6 replayed
    second.run(7, len(lines) - 7)
    assert outputs_of(sink) == uninterrupted(lines)


def test_a_state_read_by_other_stateful_streams_recovers_batch_by_batch(
    sc: Any, tmp_path: Path
) -> None:
    lines = make_input(4, 12)
    expected = MemorySink()
    one = Driver(sc, tmp_path / "one", lines, expected, graph=chained)
    one.recover()
    one.run(0, len(lines))
    sink = MemorySink()
    first = Driver(sc, tmp_path / "run", lines, sink, graph=chained)
    first.recover()
    first.run(0, 8)
    first.plan_only(8)
    second = Driver(sc, tmp_path / "run", lines, sink, graph=chained)
    assert second.recover() == 2
    second.run(9, len(lines) - 9)
    assert outputs_of(sink) == outputs_of(expected)
    assert any(outputs_of(expected)["windows"]) and any(outputs_of(expected)["sessions"])


def test_damaged_latest_checkpoint_falls_back_to_the_previous_one(sc: Any, tmp_path: Path) -> None:
    lines = make_input(2, 8)
    expected = uninterrupted(lines)
    sink = MemorySink()
    first = Driver(sc, tmp_path / "run", lines, sink)
    first.recover()
    first.run(0, 7)  # checkpoints after batches 2 and 5
    latest = first.store.files.root / str(FIRST_BATCH_MS + 5_000)
    part = next(latest.rglob("part-*.jsonl"))
    part.write_text(part.read_text() + '["x",1,0]\n')
    second = Driver(sc, tmp_path / "run", lines, sink)
    assert second.recover() == 4  # from the checkpoint of batch 2: batches 3..6
    second.run(7, len(lines) - 7)
    assert outputs_of(sink) == expected


def test_no_usable_checkpoint_is_refused_with_what_to_do(sc: Any, tmp_path: Path) -> None:
    lines = make_input(3, 6)
    first = Driver(sc, tmp_path / "run", lines, MemorySink())
    first.recover()
    first.run(0, 6)  # checkpoints after batches 2 and 5: the initial one is no longer retained
    shutil.rmtree(first.store.files.root)
    second = Driver(sc, tmp_path / "run", lines, MemorySink())
    with pytest.raises(StateRecoveryError, match="no usable checkpoint.*new app id"):
        second.recover()


def test_checkpoint_holds_data_not_code(sc: Any, tmp_path: Path) -> None:
    lines = [["a b", "b"], ["c"], []]
    driver = Driver(sc, tmp_path / "run", lines, MemorySink())
    driver.recover()
    driver.run(0, 3)
    state_piece = next(p for p in driver.store.files.root.rglob("*update_state_by_key-state"))
    # Each line of a part file is a JSON array of `[key, state, touched]` records.
    lines = [
        line for part in state_piece.glob("part-*.jsonl") for line in part.read_text().splitlines()
    ]
    rows = sorted(record for line in lines for record in json.loads(line))
    batch = FIRST_BATCH_MS
    assert rows == [["a", 1, batch], ["b", 2, batch], ["c", 1, batch + 1000]]
