"""The driver retires sink markers only of batches the journal has forgotten (and only a grace
period before them): on a real file journal, with outputs that record what they are told."""

from __future__ import annotations

from pathlib import Path

import pytest

from connectors.offsets import OffsetRange
from service.driver.marker_retention import ForgettingJournal
from service.errors import SinkError
from service.journal.base import compact, forgotten_before
from service.journal.file import FileJournal
from service.journal.records import CheckpointRecord, CompletedRecord, PlannedRecord

GRACE_MS = 3000


class RecordingOutput:
    def __init__(self, fails: int = 0) -> None:
        self.told: list[tuple[str, int]] = []
        self.fails = fails

    def forget_before(self, app: str, batch_time: int) -> None:
        if self.fails:
            self.fails -= 1
            msg = "the database is down"
            raise SinkError(msg)
        self.told.append((app, batch_time))


def planned(epoch: int, t: int) -> PlannedRecord:
    start = t // 100  # batch t reads offsets [t/100, t/100 + 10): contiguous for t = 1000, 2000...
    return PlannedRecord(epoch, t, (OffsetRange("words", 0, start, start + 10),), "fp")


def journal(tmp_path: Path, *outputs: RecordingOutput, every: int = 1) -> ForgettingJournal:
    forgetting = ForgettingJournal(
        FileJournal(tmp_path / "journal"), "app", outputs, prune_every=every, grace_ms=GRACE_MS
    )
    forgetting.open()
    return forgetting


def run_batches(forgetting: ForgettingJournal, times: range, checkpoint_every: int = 0) -> None:
    for i, t in enumerate(times, start=1):
        forgetting.append(planned(1, t))
        forgetting.append(CompletedRecord(1, t, {"out": 3}))
        if checkpoint_every and i % checkpoint_every == 0:
            forgetting.append(CheckpointRecord(1, t, {}))


def test_a_stateless_job_forgets_all_but_the_grace_before_its_last_completed_batch(
    tmp_path: Path,
) -> None:
    output, other = RecordingOutput(), RecordingOutput()
    forgetting = journal(tmp_path, output, other, every=2)
    run_batches(forgetting, range(1000, 11_000, 1000))
    assert forgetting.forgotten == 10_000 - GRACE_MS
    assert output.told == other.told
    told = [t for _, t in output.told]
    assert told == sorted(set(told)) and told[-1] == 7000  # only forward, never twice
    assert {app for app, _ in output.told} == {"app"}


def test_a_stateful_job_keeps_every_batch_since_its_oldest_retained_checkpoint(
    tmp_path: Path,
) -> None:
    output = RecordingOutput()
    forgetting = journal(tmp_path, output)
    forgetting.append(CheckpointRecord(1, 0, {}))  # the initial state
    run_batches(forgetting, range(1000, 21_000, 1000), checkpoint_every=4)
    # Checkpoints at 4000, 8000, 12000, 16000, 20000: the two latest are retained.
    assert forgetting.forgotten == 16_000 - GRACE_MS


def test_nothing_the_journal_still_keeps_or_may_replay_is_ever_forgotten(tmp_path: Path) -> None:
    output = RecordingOutput()
    forgetting = journal(tmp_path, output)
    late: int | None = None  # every seventh batch completes only after the next one is planned
    for t in range(1000, 31_000, 1000):
        forgetting.append(planned(1, t))
        if late is not None:
            forgetting.append(CompletedRecord(1, late, {}))
            late = None
        if t % 7000 == 0:
            late = t
        else:
            forgetting.append(CompletedRecord(1, t, {}))
        if t % 5000 == 0:
            forgetting.append(CheckpointRecord(1, t, {}))
        records = forgetting.read()
        kept = [r.batch_time for r in compact(records) if isinstance(r, PlannedRecord)]
        completed = {r.batch_time for r in records if isinstance(r, CompletedRecord)}
        pending = [r.batch_time for r in records if isinstance(r, PlannedRecord)]
        pending = [p for p in pending if p not in completed]
        assert (
            forgetting.forgotten is None or forgetting.forgotten <= min(kept + pending) - GRACE_MS
        )
    assert forgetting.forgotten is not None and forgetting.forgotten > 0


def test_an_output_that_cannot_forget_now_is_asked_again_later(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    output = RecordingOutput(fails=3)
    forgetting = journal(tmp_path, output)
    run_batches(forgetting, range(1000, 6000, 1000))  # the batches go on regardless
    assert caplog.text.count("sink markers not pruned this time: the database is down") == 3
    assert output.told[-1] == ("app", 5000 - GRACE_MS)


def test_an_empty_journal_forgets_nothing(tmp_path: Path) -> None:
    assert forgotten_before(FileJournal(tmp_path / "journal").read()) is None
