"""The files sink: atomic parts, idempotent writes, identical bytes on replay, `_SUCCESS`."""

from __future__ import annotations

import errno
import os
import pickle
from pathlib import Path

import pytest

from service.errors import SinkError
from sinks.base import BatchKey, WriteResult
from sinks.files import FileSink


def key(partition: int, batch_time: int = 5000) -> BatchKey:
    return BatchKey("app", "counts", batch_time, partition)


def test_write_then_rewrite_is_skipped(tmp_path: Path) -> None:
    sink = FileSink(tmp_path)
    first = sink.write(key(0), [("a", 1), ("b", 2)])
    second = sink.write(key(0), [("a", 1), ("b", 999)])
    assert (first.rows, first.skipped) == (2, False)
    assert second.skipped
    assert sink.part_path(key(0)).read_text() == '["a",1]\n["b",2]\n'


def test_replay_writes_identical_bytes_whatever_the_row_order(tmp_path: Path) -> None:
    one, two = FileSink(tmp_path / "one"), FileSink(tmp_path / "two")
    one.write(key(0), [("b", 2), ("a", 1), {"z": 1, "y": 2}])
    two.write(key(0), [{"y": 2, "z": 1}, ("a", 1), ("b", 2)])
    assert one.part_path(key(0)).read_bytes() == two.part_path(key(0)).read_bytes()


def test_commit_needs_every_part_and_is_idempotent(tmp_path: Path) -> None:
    sink = FileSink(tmp_path)
    sink.write(key(0), [1])
    with pytest.raises(SinkError, match=r"parts \[1\] of 2 are missing"):
        sink.commit("app", "counts", 5000, 2)
    assert sink.committed_batches("counts") == []
    sink.write(key(1), [2])
    sink.commit("app", "counts", 5000, 2)
    sink.commit("app", "counts", 5000, 2)
    assert sink.committed_batches("counts") == [5000]
    assert sorted(sink.read_batch("counts", 5000)) == [1, 2]


def test_empty_batch_commits_with_no_parts(tmp_path: Path) -> None:
    sink = FileSink(tmp_path)
    sink.commit("app", "counts", 6000, 0)
    assert sink.committed_batches("counts") == [6000]
    assert sink.read_batch("counts", 6000) == []


def test_no_temporary_files_are_left_behind(tmp_path: Path) -> None:
    sink = FileSink(tmp_path)
    sink.write(key(0), range(100))
    leftovers = [p.name for p in tmp_path.rglob("*") if p.name.endswith(".tmp")]
    assert leftovers == []


def test_sink_pickles_as_configuration(tmp_path: Path) -> None:
    clone = pickle.loads(pickle.dumps(FileSink(tmp_path)))
    assert clone.root == str(tmp_path)


def test_a_file_system_without_hard_links_gets_the_part_renamed_into_place(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse_link(source: object, target: object) -> None:
        raise OSError(errno.EPERM, "Operation not permitted")

    monkeypatch.setattr(os, "link", refuse_link)
    sink = FileSink(tmp_path)

    assert sink.write(key(0), [("a", 1)]) == WriteResult(rows=1)
    assert sink.part_path(key(0)).read_text() == '["a",1]\n'
    assert [p.name for p in tmp_path.rglob("*.tmp")] == []
