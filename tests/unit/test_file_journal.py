"""FileJournal: framing, durability rules, torn tails, corruption, cross-process fencing.

What every journal backend does (epochs, fencing, dead appends, compaction, the CLI) is checked on
this one too by the journal contract suite, tests/contracts/test_journal_contract.py.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import zlib
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from connectors.offsets import OffsetRange
from service.cli.journal import journal as journal_group
from service.errors import FencedOut, JournalCorrupt, JournalError
from service.journal.base import JournalState
from service.journal.file import HEADER, FileJournal, encode_frame
from service.journal.records import (
    CompletedRecord,
    EpochRecord,
    PlannedRecord,
    UnknownRecordVersion,
)


def planned(epoch: int, t: int, start: int, end: int) -> PlannedRecord:
    return PlannedRecord(epoch, t, (OffsetRange("t", 0, start, end),), "fp")


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "journal" / "app.journal"


@pytest.fixture
def journal(path: Path) -> Iterator[FileJournal]:
    with FileJournal(path, owner="test") as j:
        yield j


def write_batches(j: FileJournal, epoch: int, times: range) -> None:
    for i, t in enumerate(times):
        j.append(planned(epoch, t, i * 10, i * 10 + 10))
        j.append(CompletedRecord(epoch, t, {"out": 10}))


def frame_offsets(path: Path) -> list[int]:
    data, offsets, pos = path.read_bytes(), [], 0
    while pos < len(data):
        offsets.append(pos)
        pos += HEADER.size + HEADER.unpack_from(data, pos)[0]
    return offsets


def test_file_holds_length_crc_json_frames(journal: FileJournal) -> None:
    journal.open()
    data = journal.path.read_bytes()
    length, _crc = HEADER.unpack_from(data, 0)
    assert data[HEADER.size : HEADER.size + length].startswith(b'{"v":1,"type":"epoch"')
    assert len(data) == HEADER.size + length


@pytest.mark.parametrize(
    "cut", [3, HEADER.size + 2, -1], ids=["short-header", "short-body", "last-byte"]
)
def test_torn_tail_is_dropped_then_truncated_so_appends_follow(path: Path, cut: int) -> None:
    with FileJournal(path) as j:
        j.open()
        j.append(planned(1, 1000, 0, 10))
        good_size = path.stat().st_size
        j.append(planned(1, 2000, 10, 20))
    data = path.read_bytes()
    path.write_bytes(data[: good_size + cut] if cut > 0 else data[:cut])

    assert FileJournal(path).read()[-1] == planned(1, 1000, 0, 10)
    with FileJournal(path) as j:
        assert j.open() == 2
        j.append(planned(2, 2000, 10, 20))
    records = FileJournal(path).read()
    assert records[-1] == planned(2, 2000, 10, 20)
    JournalState.from_records(records).validate()


def test_crc_mismatch_in_last_record_is_a_torn_tail(path: Path) -> None:
    with FileJournal(path) as j:
        j.open()
        j.append(planned(1, 1000, 0, 10))
    data = bytearray(path.read_bytes())
    data[-2] ^= 0xFF
    path.write_bytes(bytes(data))
    assert [type(r) for r in FileJournal(path).read()] == [EpochRecord]


def test_zero_filled_tail_is_a_torn_tail(path: Path) -> None:
    with FileJournal(path) as j:
        j.open()
    with path.open("ab") as f:
        f.write(b"\0" * 100)
    assert len(FileJournal(path).read()) == 1


def test_corrupt_middle_record_names_file_and_offset(path: Path) -> None:
    with FileJournal(path) as j:
        j.open()
        write_batches(j, 1, range(1000, 4000, 1000))
    offsets = frame_offsets(path)
    data = bytearray(path.read_bytes())
    data[offsets[2] + HEADER.size + 5] ^= 0x01
    path.write_bytes(bytes(data))

    with pytest.raises(JournalCorrupt) as info:
        FileJournal(path).read()
    text = str(info.value)
    assert str(path) in text and f"at byte {offsets[2]}" in text
    assert f"valid record follows at byte {offsets[3]}" in text
    assert "restore the journal from a backup" in text
    with pytest.raises(JournalCorrupt), FileJournal(path) as j:
        j.open()


def test_corrupt_length_field_in_middle_is_not_mistaken_for_a_tail(path: Path) -> None:
    with FileJournal(path) as j:
        j.open()
        write_batches(j, 1, range(1000, 3000, 1000))
    offsets = frame_offsets(path)
    data = bytearray(path.read_bytes())
    data[offsets[1] : offsets[1] + 4] = (10**6).to_bytes(4, "big")
    path.write_bytes(bytes(data))
    with pytest.raises(JournalCorrupt, match=f"at byte {offsets[1]}"):
        FileJournal(path).read()


def test_valid_frame_with_bad_json_is_corrupt_with_offset(path: Path) -> None:
    with FileJournal(path) as j:
        j.open()
    body = b'{"v":1,"type":"planned"}'
    with path.open("ab") as f:
        f.write(HEADER.pack(len(body), zlib.crc32(body)) + body)
    with pytest.raises(JournalCorrupt, match=r"record at byte \d+: .*malformed"):
        FileJournal(path).read()


def test_unknown_version_in_the_file_is_not_called_corruption(path: Path) -> None:
    path.parent.mkdir(parents=True)
    record = EpochRecord(1, 0, "future")
    frame = encode_frame(record).replace(b'{"v":1', b'{"v":9')
    body = frame[HEADER.size :]
    path.write_bytes(HEADER.pack(len(body), zlib.crc32(body)) + body)
    with pytest.raises(UnknownRecordVersion, match="record at byte 0: .*version 9"):
        FileJournal(path).read()


def test_opener_in_another_process_fences_this_one(path: Path) -> None:
    with FileJournal(path) as j:
        j.open()
        code = textwrap.dedent(
            f"""
            from pathlib import Path
            from service.journal.file import FileJournal
            j = FileJournal(Path({str(path)!r}), owner="other")
            print(j.open())
            j.close()
            """
        )
        env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
        out = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True
        )
        assert out.stdout.strip() == "2"
        with pytest.raises(FencedOut):
            j.append(planned(1, 1000, 0, 10))


def test_fenced_writer_notices_after_the_new_one_compacted(path: Path) -> None:
    with FileJournal(path) as old, FileJournal(path, compact_bytes=2_000) as new:
        old.open()
        new.open()
        write_batches(new, 2, range(1000, 40_000, 1000))
        assert path.stat().st_size < 4_000
        with pytest.raises(FencedOut):
            old.append(planned(1, 1000, 0, 10))


def test_failed_write_leaves_no_partial_record_and_refuses_more(
    journal: FileJournal, monkeypatch: pytest.MonkeyPatch
) -> None:
    journal.open()
    size = journal.path.stat().st_size
    real_write = os.write

    def half_then_fail(fd: int, data: bytes | memoryview) -> int:
        real_write(fd, bytes(data)[:5])
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "write", half_then_fail)
    with pytest.raises(JournalError, match="No space left.*refuses further appends"):
        journal.append(planned(1, 1000, 0, 10))
    monkeypatch.undo()
    assert journal.path.stat().st_size == size
    with pytest.raises(JournalError, match="earlier write failed"):
        journal.append(planned(1, 1000, 0, 10))


def test_directory_and_lock_file_are_created(path: Path, journal: FileJournal) -> None:
    journal.open()
    assert path.exists() and journal.lock_path.exists()


# --- `dstreams journal show|verify` on a file journal -----------------------------------------


def test_cli_verify_fails_on_a_corrupt_record_and_names_it(path: Path) -> None:
    with FileJournal(path) as j:
        j.open()
        write_batches(j, 1, range(1000, 3000, 1000))
    runner = CliRunner()

    data = bytearray(path.read_bytes())
    data[frame_offsets(path)[1] + HEADER.size + 3] ^= 0x01
    path.write_bytes(bytes(data))
    corrupt = runner.invoke(journal_group, ["verify", "--file", str(path)])
    assert corrupt.exit_code == 1 and "is corrupt at byte" in corrupt.output
    assert runner.invoke(journal_group, ["show"]).exit_code == 2


def job_config(tmp_path: Path, journal_path: Path) -> Path:
    config = tmp_path / "job.yaml"
    config.write_text(
        "app_id: wordcount\njob: examples.wordcount:build\n"
        "kafka: {bootstrap_servers: 'localhost:9092'}\n"
        f"journal: {{type: file, path: '{journal_path}'}}\n"
    )
    return config


def test_cli_reads_the_journal_the_config_names(path: Path, tmp_path: Path) -> None:
    with FileJournal(path) as j:
        j.open()
        write_batches(j, 1, range(1000, 3000, 1000))
    runner = CliRunner()
    config = job_config(tmp_path, path)
    outputs = {}
    for command in ("show", "verify"):
        by_config = runner.invoke(journal_group, [command, "--config", str(config)])
        by_path = runner.invoke(journal_group, [command, "--file", str(path)])
        assert by_config.exit_code == 0, by_config.output
        assert by_config.output == by_path.output
        outputs[command] = by_config.output
    assert f"journal:        file {path}" in outputs["show"]
    assert "pending:        none" in outputs["show"]
    assert outputs["verify"].startswith(f"file {path}: ok — 5 records")


def test_cli_path_options_win_over_the_config(path: Path, tmp_path: Path) -> None:
    with FileJournal(path) as j:
        j.open()
        write_batches(j, 1, range(1000, 2000, 1000))
    config = job_config(tmp_path, tmp_path / "elsewhere" / "journal")
    shown = CliRunner().invoke(
        journal_group, ["show", "--config", str(config), "--file", str(path)]
    )
    assert shown.exit_code == 0, shown.output
    assert f"journal:        file {path}" in shown.output


def test_cli_says_what_to_give_when_no_journal_is_named(path: Path, tmp_path: Path) -> None:
    runner = CliRunner()
    neither = runner.invoke(journal_group, ["show"], env={"DSTREAMS_CONFIG": None})
    assert neither.exit_code == 2
    assert "give --config JOB.yaml (the job's journal settings), or --file PATH" in neither.output
    config = job_config(tmp_path, path)  # names a journal no driver has written yet
    missing = runner.invoke(journal_group, ["verify", "--config", str(config)])
    assert missing.exit_code == 2
    assert f"no journal file at {path} (journal.path in {config})" in missing.output
