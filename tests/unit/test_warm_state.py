"""Warm state's choice of checkpoint, without Spark: which journaled checkpoint a standby
pre-loads, and which pre-loaded checkpoint recovery may use."""

from __future__ import annotations

from pathlib import Path

from service.driver.warm_state import PreloadedCheckpoint, StatePreloader, latest_checkpoint
from service.graph.checkpoint_store import CheckpointStore
from service.journal.base import JournalState
from service.journal.file import FileJournal
from service.journal.records import CheckpointRecord

REFS = {"s3-update_state_by_key-state": "5000/s3-update_state_by_key-state"}


def preloaded(batch_time: int, refs: dict[str, str]) -> PreloadedCheckpoint:
    return PreloadedCheckpoint(batch_time, refs, {}, {})


def test_a_preloaded_checkpoint_matches_only_the_same_batch_and_refs() -> None:
    held = preloaded(5000, REFS)
    assert held.matches(CheckpointRecord(7, 5000, dict(REFS)))
    assert not held.matches(CheckpointRecord(7, 8000, dict(REFS)))
    assert not held.matches(CheckpointRecord(7, 5000, {"other": "5000/other"}))


def test_the_standby_preloads_the_checkpoint_recovery_tries_first() -> None:
    records = [CheckpointRecord(1, t, {"p": f"{t}/p"}) for t in (0, 2000, 5000)]
    state = JournalState.from_records(records)
    chosen = latest_checkpoint(state)
    assert chosen is not None and chosen.batch_time == 5000
    assert latest_checkpoint(JournalState.from_records([])) is None


def test_nothing_is_loaded_before_a_checkpoint_with_state_is_journaled(tmp_path: Path) -> None:
    journal = FileJournal(tmp_path / "journal")
    preloader = StatePreloader(None, CheckpointStore(tmp_path / "checkpoints"), journal)
    assert preloader.refresh() is None  # no journal yet
    with FileJournal(tmp_path / "journal") as active:
        active.open()
        active.append(CheckpointRecord(1, 0, {}))  # the initial checkpoint: no files
    assert preloader.refresh() is None
    assert preloader.take() is None
    assert not (tmp_path / "checkpoints").exists()  # a standby writes nothing
