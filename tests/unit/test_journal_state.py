"""JournalState: the fold of journal records, its checks, and compaction."""

from __future__ import annotations

import pytest

from connectors.offsets import OffsetRange
from service.driver.recovery import first_new_batch_time
from service.errors import JournalError, OffsetGap
from service.journal import records as journal
from service.journal.base import JournalState, compact, replay


def planned(t: int, *ranges: tuple[str, int, int, int], epoch: int = 1) -> journal.PlannedRecord:
    return journal.PlannedRecord(epoch, t, tuple(OffsetRange(*r) for r in ranges), "fp")


def completed(t: int, epoch: int = 1) -> journal.CompletedRecord:
    return journal.CompletedRecord(epoch, t, {"out": 1})


def steady_journal() -> list[journal.JournalRecord]:
    """Epoch 1 plans and completes batches 1000..3000, plans 4000 and 5000, then dies."""
    return [
        journal.EpochRecord(1, 0, "a"),
        planned(1000, ("t", 0, 0, 10), ("t", 1, 0, 5)),
        completed(1000),
        planned(2000, ("t", 0, 10, 20), ("t", 1, 5, 5)),
        completed(2000),
        journal.CheckpointRecord(1, 2000, {"s": "ckpt-2000"}),
        planned(3000, ("t", 0, 20, 25), ("t", 1, 5, 9)),
        completed(3000),
        planned(4000, ("t", 0, 25, 30), ("t", 1, 9, 9)),
        planned(5000, ("t", 0, 30, 31), ("t", 1, 9, 12)),
    ]


def test_fold_gives_epoch_batches_checkpoint_and_pending() -> None:
    state = JournalState.from_records([*steady_journal(), journal.EpochRecord(2, 9, "b")])
    state.validate()
    assert state.epoch == 2
    assert [e.owner for e in state.epochs] == ["a", "b"]
    assert sorted(state.planned) == [1000, 2000, 3000, 4000, 5000]
    assert sorted(state.completed) == [1000, 2000, 3000]
    assert state.checkpoint == journal.CheckpointRecord(1, 2000, {"s": "ckpt-2000"})
    assert [p.batch_time for p in state.pending()] == [4000, 5000]
    assert state.last_positions() == {("t", 0): 31, ("t", 1): 12}
    assert state.last_planned is not None and state.last_planned.batch_time == 5000
    assert state.last_completed is not None and state.last_completed.batch_time == 3000


def test_empty_journal() -> None:
    state = JournalState.from_records([])
    state.validate()
    assert (state.epoch, state.pending(), state.last_positions()) == (0, [], {})
    assert state.last_planned is None and state.checkpoint is None
    assert compact([]) == []


def test_gap_names_partition_batches_offsets_and_a_remedy() -> None:
    records = [
        journal.EpochRecord(1, 0, "a"),
        planned(1000, ("t", 3, 0, 10)),
        planned(2000, ("t", 3, 12, 20)),
    ]
    with pytest.raises(OffsetGap) as info:
        JournalState.from_records(records).validate()
    text = str(info.value)
    assert "'t' partition 3" in text
    assert "batch 1000 planned until offset 10" in text
    assert "batch 2000 planned from offset 12" in text
    assert "2 offsets never read" in text
    assert "dstreams journal show" in text


def test_overlap_is_reported_as_read_twice() -> None:
    records = [planned(1000, ("t", 0, 0, 10)), planned(2000, ("t", 0, 8, 20))]
    with pytest.raises(OffsetGap, match="2 offsets read twice"):
        JournalState.from_records(records).validate()


def test_contiguity_is_checked_in_batch_time_order_not_append_order() -> None:
    records = [planned(2000, ("t", 0, 10, 20)), planned(1000, ("t", 0, 0, 10))]
    JournalState.from_records(records).validate()


def test_partition_appearing_later_starts_anywhere() -> None:
    records = [planned(1000, ("t", 0, 0, 10)), planned(2000, ("t", 0, 10, 20), ("t", 1, 500, 510))]
    JournalState.from_records(records).validate()


def test_replanned_batch_with_same_ranges_is_fine() -> None:
    records = [
        *steady_journal(),
        journal.EpochRecord(2, 9, "b"),
        planned(4000, ("t", 1, 9, 9), ("t", 0, 25, 30), epoch=2),
    ]
    state = JournalState.from_records(records)
    state.validate()
    assert state.planned[4000].epoch == 2


def test_replanned_batch_with_other_ranges_is_an_error() -> None:
    records = [
        *steady_journal(),
        journal.EpochRecord(2, 9, "b"),
        planned(5000, ("t", 0, 30, 40), ("t", 1, 9, 12), epoch=2),
    ]
    with pytest.raises(JournalError, match="batch 5000 was planned twice.*epoch 1.*epoch 2"):
        JournalState.from_records(records).validate()


def test_record_from_a_fenced_epoch_is_an_error() -> None:
    records = [
        journal.EpochRecord(1, 0, "a"),
        journal.EpochRecord(2, 1, "b"),
        planned(1000, ("t", 0, 0, 1)),
    ]
    with pytest.raises(JournalError, match="written by epoch 1 after epoch 2"):
        JournalState.from_records(records).validate()


def test_epochs_must_grow() -> None:
    records = [journal.EpochRecord(2, 0, "a"), journal.EpochRecord(2, 1, "b")]
    with pytest.raises(JournalError, match="opens epoch 2"):
        JournalState.from_records(records).validate()


def test_completed_without_plan_is_an_error() -> None:
    with pytest.raises(JournalError, match=r"batches \[7000\].*never planned"):
        JournalState.from_records([journal.EpochRecord(1, 0, "a"), completed(7000)]).validate()


def test_replay_starts_from_the_last_snapshot() -> None:
    snap = journal.SnapshotRecord(
        2, (journal.EpochRecord(1, 0, "a"), planned(1000, ("t", 0, 0, 1)))
    )
    records = replay([journal.EpochRecord(1, 0, "old"), snap, completed(1000, epoch=2)])
    assert records == [
        journal.EpochRecord(1, 0, "a"),
        planned(1000, ("t", 0, 0, 1)),
        completed(1000, 2),
    ]


def test_compact_keeps_checkpoint_batches_after_it_and_latest_epoch() -> None:
    records = [*steady_journal(), journal.EpochRecord(2, 9, "b")]
    kept = compact(records)
    assert kept == [
        planned(2000, ("t", 0, 10, 20), ("t", 1, 5, 5)),
        completed(2000),
        journal.CheckpointRecord(1, 2000, {"s": "ckpt-2000"}),
        planned(3000, ("t", 0, 20, 25), ("t", 1, 5, 9)),
        completed(3000),
        planned(4000, ("t", 0, 25, 30), ("t", 1, 9, 9)),
        planned(5000, ("t", 0, 30, 31), ("t", 1, 9, 12)),
        journal.EpochRecord(2, 9, "b"),
    ]
    before, after = JournalState.from_records(records), JournalState.from_records(kept)
    after.validate()
    assert after.epoch == before.epoch
    assert after.pending() == before.pending()
    assert after.last_positions() == before.last_positions()
    assert after.checkpoint == before.checkpoint


def test_compact_keeps_two_checkpoints_and_every_batch_from_the_older() -> None:
    records = [
        *steady_journal(),
        completed(4000),
        journal.CheckpointRecord(1, 4000, {"s": "ckpt-4000"}),
        completed(5000),
        journal.CheckpointRecord(1, 5000, {"s": "ckpt-5000"}),
    ]
    kept = compact(records)
    checkpoints = [r.batch_time for r in kept if isinstance(r, journal.CheckpointRecord)]
    assert checkpoints == [4000, 5000]
    after = JournalState.from_records(kept)
    assert sorted(after.planned) == [4000, 5000]
    assert [r.batch_time for r in after.retained_checkpoints] == [4000, 5000]


def test_compact_without_checkpoint_keeps_last_completed_and_pending() -> None:
    records = [r for r in steady_journal() if not isinstance(r, journal.CheckpointRecord)]
    kept = compact(records)
    assert [(type(r).__name__, getattr(r, "batch_time", None)) for r in kept] == [
        ("EpochRecord", None),
        ("PlannedRecord", 3000),
        ("CompletedRecord", 3000),
        ("PlannedRecord", 4000),
        ("PlannedRecord", 5000),
    ]


def test_compact_keeps_the_last_batch_of_a_partition_that_left_the_plan() -> None:
    records: list[journal.JournalRecord] = [
        journal.EpochRecord(1, 0, "a"),
        planned(1000, ("t", 0, 0, 10), ("gone", 0, 0, 4)),
        completed(1000),
        planned(2000, ("t", 0, 10, 20)),
        completed(2000),
        planned(3000, ("t", 0, 20, 30)),
        completed(3000),
    ]
    kept = compact(records)
    assert JournalState.from_records(kept).last_positions() == {("t", 0): 30, ("gone", 0): 4}
    JournalState.from_records(kept).validate()


def test_compact_is_idempotent() -> None:
    once = compact([*steady_journal(), journal.EpochRecord(2, 9, "b")])
    assert compact(once) == once


def test_fresh_start_runs_at_the_boundary_just_passed() -> None:
    state = JournalState.from_records([])
    assert first_new_batch_time(state, 1000, clock_ms=12_300) == 12_000
    assert first_new_batch_time(state, 1000, clock_ms=12_999) == 12_000
    assert first_new_batch_time(state, 1000, clock_ms=12_000) == 12_000


def test_restart_generates_the_batches_of_its_down_time() -> None:
    state = JournalState.from_records([planned(9_000, ("t", 0, 0, 5)), completed(9_000)])
    # Down from 9.0 s to 18.4 s: batches 10,000 to 18,000 are all due now, in order (issue 23:
    # skipping them left windows of the down time unwritten).
    assert first_new_batch_time(state, 1000, clock_ms=18_400) == 10_000
    assert first_new_batch_time(state, 1000, clock_ms=9_000 + 3_600_000) == 10_000


def test_restart_never_reuses_a_planned_batch_time() -> None:
    state = JournalState.from_records([planned(18_000, ("t", 0, 0, 5))])
    assert first_new_batch_time(state, 1000, clock_ms=18_400) == 19_000
