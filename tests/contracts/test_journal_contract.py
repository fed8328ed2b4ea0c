"""The journal contract: what every journal backend must do, checked on each through its adapter.

Records read back in append order; each `open` takes the next epoch and fences every older writer;
an append a dying driver left half-done is never read and the next driver continues after it;
compaction keeps what recovery needs; what is stored is what `JournalState.validate` and the
`dstreams journal` CLI check (contiguity included). The backends and how to add one are in
`tests/contracts/journal_backends.py`; storage details (framing, corruption, topic settings,
snapshot windows, producer errors) stay in each backend's own tests.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from connectors.offsets import OffsetRange
from service.cli.journal import journal as journal_group
from service.errors import FencedOut, JournalError, OffsetGap
from service.journal.base import Journal, JournalState
from service.journal.records import (
    CheckpointRecord,
    CompletedRecord,
    EpochRecord,
    PlannedRecord,
)
from tests.contracts.journal_backends import JournalBackend

TOPIC = "words"


def planned(epoch: int, t: int, start: int, end: int) -> PlannedRecord:
    return PlannedRecord(epoch, t, (OffsetRange(TOPIC, 0, start, end),), "fp")


def write_batches(journal: Journal, epoch: int, times: range) -> None:
    """Plans and completes a batch of 10 offsets per time, contiguous from offset 0."""
    for i, t in enumerate(times):
        journal.append(planned(epoch, t, i * 10, i * 10 + 10))
        journal.append(CompletedRecord(epoch, t, {"out": 10}))


def test_records_read_back_in_order_from_a_fresh_reader(journal_backend: JournalBackend) -> None:
    writer = journal_backend.make(owner="driver-1")
    assert isinstance(writer, Journal)
    assert writer.open() == 1
    records = [planned(1, 1000, 0, 10), CompletedRecord(1, 1000, {"counts": 4})]
    for record in records:
        writer.append(record)

    read = journal_backend.make().read()

    assert isinstance(read[0], EpochRecord) and read[0].epoch == 1 and read[0].owner == "driver-1"
    assert read[1:] == records
    assert writer.read() == read


def test_a_journal_never_opened_reads_empty_and_reading_does_not_create_it(
    journal_backend: JournalBackend,
) -> None:
    assert journal_backend.make().read() == []
    assert not journal_backend.exists()

    journal_backend.make().open()
    assert journal_backend.exists()


def test_reopen_takes_the_next_epoch(journal_backend: JournalBackend) -> None:
    for expected in (1, 2, 3):
        journal = journal_backend.make()
        assert journal.open() == expected
        journal.append(planned(expected, expected * 1000, (expected - 1) * 10, expected * 10))
        journal.close()

    state = JournalState.from_records(journal_backend.make().read())
    state.validate()
    assert state.epoch == 3
    assert [e.epoch for e in state.epochs] == (
        [1, 2, 3] if journal_backend.reads_every_epoch else [3]
    )
    assert sorted(state.planned) == [1000, 2000, 3000]


def test_append_before_open_or_with_another_epoch_is_refused(
    journal_backend: JournalBackend,
) -> None:
    journal = journal_backend.make()
    with pytest.raises(JournalError, match="call open"):
        journal.append(planned(1, 1000, 0, 1))
    journal.open()
    with pytest.raises(JournalError, match="epoch 7 cannot be appended.*epoch 1"):
        journal.append(planned(7, 1000, 0, 1))


def test_one_object_cannot_open_twice(journal_backend: JournalBackend) -> None:
    journal = journal_backend.make()
    journal.open()
    with pytest.raises(JournalError, match="already open"):
        journal.open()


def test_a_newer_opener_fences_the_older_writer(journal_backend: JournalBackend) -> None:
    old, new = journal_backend.make(owner="old"), journal_backend.make(owner="new")
    assert old.open() == 1
    old.append(planned(1, 1000, 0, 10))
    assert new.open() == 2

    with pytest.raises(FencedOut, match=journal_backend.fenced_says):
        old.append(CompletedRecord(1, 1000, {}))
    with pytest.raises(JournalError):  # and it stays fenced
        old.append(CompletedRecord(1, 1000, {}))

    new.append(CompletedRecord(2, 1000, {}))
    state = JournalState.from_records(journal_backend.make().read())
    state.validate()
    assert state.epoch == 2
    assert [(t, c.epoch) for t, c in state.completed.items()] == [(1000, 2)]


def test_an_append_cut_off_by_a_dying_driver_is_never_read(journal_backend: JournalBackend) -> None:
    dead = journal_backend.make()
    assert dead.open() == 1
    dead.append(planned(1, 1000, 0, 10))
    journal_backend.die_mid_append(dead, planned(1, 2000, 10, 20))

    assert journal_backend.make().read()[-1] == planned(1, 1000, 0, 10)
    successor = journal_backend.make()
    assert successor.open() == 2
    successor.append(planned(2, 2000, 10, 20))

    records = journal_backend.make().read()
    assert records[-1] == planned(2, 2000, 10, 20)
    assert planned(1, 2000, 10, 20) not in records
    JournalState.from_records(records).validate()


def test_compaction_keeps_what_recovery_needs(journal_backend: JournalBackend) -> None:
    writer = journal_backend.make(compacting=True)
    epoch = writer.open()
    write_batches(writer, epoch, range(1000, 50_000, 1000))
    writer.append(CheckpointRecord(epoch, 49_000, {"s": "ckpt"}))
    writer.append(planned(epoch, 50_000, 490, 500))
    writer.close()

    journal_backend.check_compacted()
    state = JournalState.from_records(journal_backend.make().read())
    state.validate()
    assert state.epoch == 1
    assert state.checkpoint == CheckpointRecord(1, 49_000, {"s": "ckpt"})
    assert [p.batch_time for p in state.pending()] == [50_000]
    assert state.last_positions() == {(TOPIC, 0): 500}
    assert state.last_completed is not None and state.last_completed.batch_time == 49_000

    successor = journal_backend.make()
    assert successor.open() == 2
    successor.append(CompletedRecord(2, 50_000, {}))
    assert JournalState.from_records(journal_backend.make().read()).pending() == []


def test_compaction_keeps_both_retained_checkpoints_and_the_batches_after_the_older(
    journal_backend: JournalBackend,
) -> None:
    # A stateful graph checkpoints every 10 batches; recovery falls back to the older of the two
    # retained checkpoints when the latest is damaged, so compaction keeps every batch from it.
    writer = journal_backend.make(compacting=True)
    epoch = writer.open()
    for i, t in enumerate(range(1000, 51_000, 1000)):
        writer.append(planned(epoch, t, i * 10, i * 10 + 10))
        writer.append(CompletedRecord(epoch, t, {"out": 10}))
        if t % 10_000 == 0:
            writer.append(CheckpointRecord(epoch, t, {"s": f"ckpt-{t}"}))
    writer.append(planned(epoch, 51_000, 500, 510))
    writer.close()

    journal_backend.check_compacted()
    state = JournalState.from_records(journal_backend.make().read())
    state.validate()
    assert [c.batch_time for c in state.retained_checkpoints] == [40_000, 50_000]
    assert state.checkpoint == CheckpointRecord(1, 50_000, {"s": "ckpt-50000"})
    # Compaction runs whenever the backend decides, so more may be kept, but never less.
    assert set(range(40_000, 52_000, 1000)) <= set(state.planned)
    assert set(range(40_000, 51_000, 1000)) <= set(state.completed)
    assert [p.batch_time for p in state.pending()] == [51_000]


def test_offsets_that_are_not_contiguous_are_reported(journal_backend: JournalBackend) -> None:
    writer = journal_backend.make()
    writer.open()
    write_batches(writer, 1, range(1000, 3000, 1000))
    writer.append(planned(1, 3000, 25, 30))  # the batch before ended at offset 20

    with pytest.raises(OffsetGap, match="5 offsets never read"):
        JournalState.from_records(journal_backend.make().read()).validate()
    gap = CliRunner().invoke(journal_group, ["verify", *journal_backend.cli_location()])
    assert gap.exit_code == 1 and "5 offsets never read" in gap.output


def test_cli_shows_and_verifies_a_healthy_journal(journal_backend: JournalBackend) -> None:
    writer = journal_backend.make(owner="driver-a")
    writer.open()
    write_batches(writer, 1, range(1000, 3000, 1000))
    writer.append(planned(1, 3000, 20, 30))
    where = journal_backend.cli_location()
    runner = CliRunner()

    shown = runner.invoke(journal_group, ["show", *where])
    assert shown.exit_code == 0, shown.output
    assert "by driver-a" in shown.output
    assert "pending:        3000" in shown.output
    assert f"next offsets:   {TOPIC}-0=30" in shown.output
    verified = runner.invoke(journal_group, ["verify", *where])
    assert verified.exit_code == 0 and "ok — 6 records" in verified.output


def test_cli_reads_the_journal_a_jobs_config_names(
    journal_backend: JournalBackend, tmp_path: Path
) -> None:
    writer = journal_backend.make(owner="driver-a")
    writer.open()
    write_batches(writer, 1, range(1000, 3000, 1000))
    config = tmp_path / "job.yaml"
    settings = {"job": "examples.wordcount:build", **journal_backend.job_settings()}
    config.write_text(yaml.safe_dump(settings))
    runner = CliRunner()

    outputs = {}
    for command in ("show", "verify"):
        by_config = runner.invoke(journal_group, [command, "--config", str(config)])
        assert by_config.exit_code == 0, by_config.output
        by_options = runner.invoke(journal_group, [command, *journal_backend.cli_location()])
        assert by_config.output == by_options.output
        outputs[command] = by_config.output
    assert "by driver-a" in outputs["show"]
    assert f"next offsets:   {TOPIC}-0=20" in outputs["show"]
    assert "ok — " in outputs["verify"]
