"""Event-time windows across a driver's death: the watermark and the open windows are restored
from a checkpoint and recomputed forward from the journal, so a recovered driver emits exactly
what one uninterrupted driver emits (per the reference model of `event_reference`)."""

from __future__ import annotations

import operator
import random
from pathlib import Path
from typing import Any

from service.driver.checkpoints import StateCheckpoints
from service.driver.lifecycle import BatchLifecycle
from service.driver.recovery import JournalLog, recover
from service.graph import state_functions
from service.graph.checkpoint_store import CheckpointStore
from service.graph.context import StreamingContext
from service.journal.file import FileJournal
from service.testing import FIRST_BATCH_MS, INTERVAL_MS
from sinks.memory import MemorySink
from tests.spark import event_reference as reference

OPTIONS = {"length_ms": 2000, "slide_ms": 1000, "slack_ms": 1000, "allowed_lateness_ms": 2000}


def event_ms(value: int) -> int:
    return value


def make_input(seed: int, batches: int) -> list[list[tuple[str, int]]]:
    """Event times around each batch's own second, some seconds behind (late or corrections)."""
    rng = random.Random(seed)
    return [
        [
            (rng.choice("pq"), max(0, index * 1000 + rng.randint(-8000, 800)))
            for _ in range(rng.randint(0, 4))
        ]
        for index in range(batches)
    ]


class Driver:
    def __init__(self, sc: Any, workdir: Path, batches: list[Any], sink: MemorySink) -> None:
        self.ctx = StreamingContext(sc, "event", INTERVAL_MS, 2)
        source = self.ctx.queue_stream(batches)
        counts = source.count_by_key_and_event_window(
            event_time=event_ms, late="dead_letter", **OPTIONS
        )
        counts.write("counts", sink)
        counts.late_records().map(tuple).write("late", sink)
        self.journal = FileJournal(workdir / "journal")
        self.epoch = self.journal.open()
        log = JournalLog(self.journal, self.epoch, self.ctx.graph_json())
        store = CheckpointStore(workdir / "checkpoints")
        self.checkpoints = StateCheckpoints(self.ctx, store, log, 3)
        self.lifecycle = BatchLifecycle(self.ctx, log, checkpoints=self.checkpoints)
        self.lifecycle.setup_outputs()

    def run(self, first: int, count: int) -> None:
        for index in range(first, first + count):
            self.lifecycle.run_new(FIRST_BATCH_MS + index * INTERVAL_MS)


def test_recovered_event_windows_equal_an_uninterrupted_run(sc: Any, tmp_path: Path) -> None:
    batches = make_input(7, 12)
    batches[10].append(("q", 0))  # late for good by then (the watermark is past 6000)
    model = reference.Model(
        event_ms,
        state_functions.constant_one,
        operator.add,
        OPTIONS["length_ms"],
        OPTIONS["slide_ms"],
        OPTIONS["slack_ms"],
        OPTIONS["allowed_lateness_ms"],
    )
    want_counts, want_late = reference.run(model, batches)
    sink = MemorySink()
    first = Driver(sc, tmp_path / "run", batches, sink)
    recover(first.ctx, first.journal, first.lifecycle, first.epoch)
    first.run(0, 8)  # checkpoints after batches 2 and 5; 6 and 7 only in the journal
    second = Driver(sc, tmp_path / "run", batches, sink)
    assert (
        recover(second.ctx, second.journal, second.lifecycle, second.epoch).recomputed_batches == 2
    )
    second.run(8, len(batches) - 8)
    counts = [sorted((tuple(r) for r in rows), key=repr) for rows in sink.batches("counts")]
    late = [sorted(((r[0], r[1]) for r in rows), key=repr) for rows in sink.batches("late")]
    assert counts == want_counts
    assert late == want_late
    assert any(r[4] > 0 for rows in counts for r in rows), "the input should cause corrections"
    assert model.late_total > 0, "the input should have late records"
