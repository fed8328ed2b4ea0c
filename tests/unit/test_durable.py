"""The one home of write-temp, fsync, rename, fsync-the-directory (service/durable.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from service.durable import fsync_directory, replace_durably, synced_temp, write_synced


def test_replace_durably_replaces_the_whole_content_and_leaves_no_temporary_file(
    tmp_path: Path,
) -> None:
    target = tmp_path / "manifest.json"
    target.write_bytes(b"an older and longer content")
    replace_durably(target, b"new")
    assert target.read_bytes() == b"new"
    assert [p.name for p in tmp_path.iterdir()] == ["manifest.json"]


def test_replace_durably_writes_through_the_temporary_file_it_is_given(tmp_path: Path) -> None:
    target, temp = tmp_path / "journal", tmp_path / "journal.compact"
    temp.write_bytes(b"left by a compaction that crashed, and longer")
    replace_durably(target, b"records", temp=temp)
    assert target.read_bytes() == b"records"
    assert not temp.exists()


def test_a_failed_replace_leaves_the_target_as_it_was(tmp_path: Path) -> None:
    target = tmp_path / "journal"
    target.write_bytes(b"records")
    with pytest.raises(FileNotFoundError):
        replace_durably(target, b"other", temp=tmp_path / "missing" / "journal.compact")
    assert target.read_bytes() == b"records"


def test_two_temporary_files_for_one_target_never_share_a_name(tmp_path: Path) -> None:
    target = tmp_path / "part-00000.jsonl"
    first, second = synced_temp(target, b"a"), synced_temp(target, b"b")
    assert first != second
    assert (first.read_bytes(), second.read_bytes()) == (b"a", b"b")
    assert first.name.startswith(".part-00000.jsonl.") and first.parent == tmp_path
    assert not target.exists()


def test_write_synced_truncates_what_was_there(tmp_path: Path) -> None:
    path = tmp_path / "file"
    path.write_bytes(b"0123456789")
    write_synced(path, b"ab")
    assert path.read_bytes() == b"ab"


def test_fsync_directory_refuses_a_file(tmp_path: Path) -> None:
    path = tmp_path / "file"
    path.write_bytes(b"")
    fsync_directory(tmp_path)
    with pytest.raises(NotADirectoryError):
        fsync_directory(path)
