"""Warm state: a standby's state pre-loaded from the latest checkpoint, on a real Spark with a
real file journal, gives exactly what a cold recovery gives, and pre-loading writes nothing.

The drivers are those of `test_state_recovery`; what an uninterrupted driver writes comes from
the plain-Python reference model."""

from __future__ import annotations

import copy
import hashlib
import shutil
from pathlib import Path
from typing import Any

from service.driver.warm_state import StatePreloader
from service.graph.checkpoint_store import CheckpointStore
from service.journal.file import FileJournal
from service.testing import FIRST_BATCH_MS
from sinks.memory import MemorySink
from tests.spark.test_state_recovery import Driver, make_input, outputs_of, uninterrupted


def fingerprint(folder: Path) -> dict[str, str]:
    """Every file under `folder` with a hash of its bytes: shows that nothing was written."""
    return {
        str(path.relative_to(folder)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(folder.rglob("*"))
        if path.is_file()
    }


def standby(sc: Any, workdir: Path) -> StatePreloader:
    """A standby's pre-loader over the journal and checkpoints of the driver in `workdir`."""
    store = CheckpointStore(workdir / "checkpoints")
    return StatePreloader(sc, store, FileJournal(workdir / "journal"))


def test_preloaded_state_recovers_exactly_as_a_cold_recovery(sc: Any, tmp_path: Path) -> None:
    lines = make_input(4, 12)
    expected = uninterrupted(lines)
    workdir = tmp_path / "run"
    cold_sink = MemorySink()
    first = Driver(sc, workdir, lines, cold_sink)
    first.recover()
    first.run(0, 8)  # checkpoints after batches 2 and 5; 6 and 7 are only in the journal
    first.plan_only(8)  # killed with batch 8 planned
    before = fingerprint(workdir)
    preloader = standby(sc, workdir)
    preloader.refresh()
    preloaded = preloader.take()
    assert preloaded is not None
    assert preloaded.batch_time == FIRST_BATCH_MS + 5_000
    assert fingerprint(workdir) == before  # read-only: no journal append, no checkpoint file
    # Two take-overs from the same journal and files: one cold, one with the pre-loaded state.
    shutil.copytree(workdir, tmp_path / "copy")
    warm_sink = copy.deepcopy(cold_sink)  # what the killed driver committed
    cold = Driver(sc, tmp_path / "copy", lines, cold_sink)
    warm = Driver(sc, workdir, lines, warm_sink)
    warm.checkpoints.preloaded = preloaded
    assert cold.recover() == warm.recover() == 2  # batches 6 and 7 recomputed, 8 replayed
    assert warm.checkpoints.reused_preloaded and not cold.checkpoints.reused_preloaded
    cold.run(9, len(lines) - 9)
    warm.run(9, len(lines) - 9)
    assert outputs_of(warm_sink) == outputs_of(cold_sink) == expected


def test_a_newer_checkpoint_is_preloaded_and_a_stale_one_is_not_used(
    sc: Any, tmp_path: Path
) -> None:
    lines = make_input(5, 11)
    expected = uninterrupted(lines)
    workdir = tmp_path / "run"
    sink = MemorySink()
    first = Driver(sc, workdir, lines, sink)
    first.recover()
    first.run(0, 4)  # checkpoint after batch 2
    preloader = standby(sc, workdir)
    older = preloader.refresh()
    assert older is not None and older.batch_time == FIRST_BATCH_MS + 2_000
    assert preloader.refresh() is older  # nothing newer journaled: kept, not read again
    first.run(4, 3)  # checkpoint after batch 5
    newer = preloader.refresh()
    assert newer is not None and newer.batch_time == FIRST_BATCH_MS + 5_000
    assert not any(rdd.is_cached for rdd in older.rdds.values())  # the older one is released
    assert all(rdd.is_cached for rdd in newer.rdds.values())
    first.run(7, 1)
    first.plan_only(8)
    # A standby elected with the older checkpoint (say it missed the newer one) loads as cold.
    second = Driver(sc, workdir, lines, sink)
    second.checkpoints.preloaded = older
    assert second.recover() == 2  # from the checkpoint of batch 5: batches 6 and 7
    assert not second.checkpoints.reused_preloaded
    second.run(9, len(lines) - 9)
    assert outputs_of(sink) == expected
