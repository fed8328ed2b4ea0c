"""The sink contract: what every sink backend must do, checked on each through its adapter.

A write is idempotent on its `BatchKey` and atomic with the key's marker; a replay of a committed
key is skipped; `commit` checks that every partition committed and may be called again; copies
of one task racing each other commit one copy. The backends and how to add one are in
`tests/contracts/sink_backends.py`. Backend-specific behaviour (row formats, placement, error
messages, fencing details) stays in each backend's own tests.
"""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from service.errors import SinkError
from service.faults import CRASH_EXIT_CODE
from sinks.base import Sink, WriteResult
from tests.contracts.sink_backends import APP, Pair, SinkBackend, key_of

WORDS: list[Pair] = [("apple", 3), ("banana", 1), ("cherry", 2)]
T1, T2 = 1_000, 2_000
# What the contract calls on a sink; a method every sink gains is one more name here.
SINK_METHODS = ("setup", "write", "commit", "close")
WORKER = Path(__file__).with_name("sink_worker.py")
ROOT = Path(__file__).resolve().parents[2]


class RowSourceFailed(Exception):
    """Raised by a row iterator half-way, as a failing upstream computation would."""


def test_sink_has_every_method_of_the_protocol(sink_backend: SinkBackend, unique_name: str) -> None:
    sink = sink_backend.build("out")

    assert isinstance(sink, Sink)
    assert all(callable(getattr(sink, method, None)) for method in SINK_METHODS)
    assert isinstance(sink.writes_on_driver, bool)


def test_written_rows_and_markers_read_back(sink_backend: SinkBackend) -> None:
    sink = sink_backend.build("out")

    results = [
        sink.write(key_of("out", T1, 0), sink_backend.rows(WORDS[:2])),
        sink.write(key_of("out", T1, 1), sink_backend.rows([])),  # a partition with no rows
        sink.write(key_of("out", T2, 0), iter(sink_backend.rows(WORDS[2:]))),  # any iterable
    ]

    assert results == [WriteResult(2), WriteResult(0), WriteResult(1)]
    assert sink_backend.committed_rows(sink, "out") == WORDS
    assert sink_backend.committed_markers(sink, "out") == [(T1, 0), (T1, 1), (T2, 0)]


def test_second_write_of_a_key_is_skipped_and_commits_nothing(sink_backend: SinkBackend) -> None:
    sink = sink_backend.build("out")
    key = key_of("out", T1, 0)

    first = sink.write(key, sink_backend.rows(WORDS))
    second = sink.write(key, sink_backend.rows(WORDS))

    assert (first, second) == (WriteResult(3), WriteResult(0, skipped=True))
    assert sink_backend.committed_rows(sink, "out") == WORDS
    assert sink_backend.committed_markers(sink, "out") == [(T1, 0)]


def test_replay_of_a_committed_key_by_a_new_worker_is_skipped(sink_backend: SinkBackend) -> None:
    sink = sink_backend.build("out")
    key = key_of("out", T1, 1)
    sink.write(key, sink_backend.rows(WORDS))

    replayed = sink_backend.as_new_worker(sink).write(key, sink_backend.rows(WORDS[::-1]))

    assert replayed == WriteResult(0, skipped=True)  # rows may come in another order on replay
    assert sink_backend.committed_rows(sink, "out") == WORDS
    assert sink_backend.committed_markers(sink, "out") == [(T1, 1)]


def test_keys_of_other_outputs_are_independent(sink_backend: SinkBackend) -> None:
    first, other = sink_backend.build("out"), sink_backend.build("other")

    written = [
        first.write(key_of("out", T1, 0), sink_backend.rows(WORDS[:1])),
        other.write(key_of("other", T1, 0), sink_backend.rows(WORDS[1:])),
    ]

    assert written == [WriteResult(1), WriteResult(2)]
    assert sink_backend.committed_rows(first, "out") == WORDS[:1]
    assert sink_backend.committed_rows(other, "other") == WORDS[1:]


def test_commit_is_idempotent_and_refuses_a_batch_with_a_partition_missing(
    sink_backend: SinkBackend,
) -> None:
    sink = sink_backend.build("out")
    sink.write(key_of("out", T1, 0), sink_backend.rows(WORDS[:1]))

    with pytest.raises(SinkError):
        sink.commit(APP, "out", T1, 2)
    sink.write(key_of("out", T1, 1), sink_backend.rows(WORDS[1:]))
    sink.commit(APP, "out", T1, 2)
    sink.commit(APP, "out", T1, 2)
    sink.commit(APP, "out", T2, 0)  # an empty batch commits no partitions
    sink.commit(APP, "out", T2, 0)

    assert sink_backend.committed_rows(sink, "out") == WORDS
    assert sink_backend.committed_markers(sink, "out") == [(T1, 0), (T1, 1)]


def test_a_write_whose_rows_fail_half_way_commits_nothing(sink_backend: SinkBackend) -> None:
    sink = sink_backend.build("out")
    key = key_of("out", T1, 0)

    def failing_rows() -> Any:
        yield from sink_backend.rows(WORDS[:2])
        msg = "the upstream computation failed after two rows"
        raise RowSourceFailed(msg)

    with pytest.raises((RowSourceFailed, SinkError)):
        sink.write(key, failing_rows())
    assert sink_backend.committed_rows(sink, "out") == []
    assert sink_backend.committed_markers(sink, "out") == []

    assert sink.write(key, sink_backend.rows(WORDS)) == WriteResult(3)  # the retry is not skipped
    assert sink_backend.committed_rows(sink, "out") == WORDS


def test_a_process_killed_mid_write_leaves_neither_rows_nor_marker(
    shipped_sink_backend: SinkBackend, tmp_path: Path
) -> None:
    backend = shipped_sink_backend
    sink = backend.build("out")
    key = key_of("out", T1, 0)
    job = _job_file(tmp_path / "job", sink, key, backend.rows(WORDS))

    worker = _start_worker(job, crash_at="sink-mid-write")
    worker.stdin.write("go\n")  # type: ignore[union-attr]
    out, err = worker.communicate(timeout=120)

    assert worker.returncode == CRASH_EXIT_CODE, (out, err)
    assert "crash point 'sink-mid-write' reached" in err
    assert backend.committed_rows(sink, "out") == []
    assert backend.committed_markers(sink, "out") == []
    with pytest.raises(SinkError):
        sink.commit(APP, "out", T1, 1)
    assert sink.write(key, backend.rows(WORDS)) == WriteResult(3)  # the retry is not skipped
    assert sink.write(key, backend.rows(WORDS)) == WriteResult(0, skipped=True)
    assert backend.committed_rows(sink, "out") == WORDS
    assert backend.committed_markers(sink, "out") == [(T1, 0)]
    sink.commit(APP, "out", T1, 1)


def test_concurrent_copies_of_a_write_commit_one_copy(
    sink_backend: SinkBackend, tmp_path: Path
) -> None:
    sink = sink_backend.build("out")
    key = key_of("out", T1, 0)
    rows = sink_backend.rows(WORDS)

    if sink_backend.in_process:
        results = _race_in_threads(lambda: sink.write(key, rows), copies=2)
    else:
        results = _race_in_processes(_job_file(tmp_path / "job", sink, key, rows), copies=2)

    assert sorted(results, key=lambda r: r.skipped) == [WriteResult(3), WriteResult(0, True)]
    assert sink_backend.committed_rows(sink, "out") == WORDS
    assert sink_backend.committed_markers(sink, "out") == [(T1, 0)]


# --- racing copies --------------------------------------------------------------------------


def _job_file(path: Path, sink: Sink, key: Any, rows: list[Any]) -> Path:
    path.write_bytes(pickle.dumps((sink, key, rows)))
    return path


def _start_worker(job: Path, crash_at: str | None = None) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DSTREAMS_CRASH")}
    if crash_at is not None:
        env["DSTREAMS_CRASH_AT"] = crash_at
    worker = subprocess.Popen(
        [sys.executable, str(WORKER), str(job)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=ROOT,
    )
    assert worker.stdout is not None
    ready = worker.stdout.readline()
    if ready != "ready\n":
        _, err = worker.communicate(timeout=60)
        pytest.fail(f"the sink worker did not start (it printed {ready!r}):\n{err}")
    return worker


def _race_in_processes(job: Path, copies: int) -> list[WriteResult]:
    """Starts `copies` workers, lets them all load the sink, then releases them together."""
    workers = [_start_worker(job) for _ in range(copies)]
    for worker in workers:
        worker.stdin.write("go\n")  # type: ignore[union-attr]
        worker.stdin.flush()  # type: ignore[union-attr]
    results = []
    for worker in workers:
        out, err = worker.communicate(timeout=120)
        assert worker.returncode == 0, err
        rows, skipped = json.loads(out)
        results.append(WriteResult(rows, skipped))
    return results


def _race_in_threads(write: Any, copies: int) -> list[WriteResult]:
    start = threading.Barrier(copies)
    results: list[WriteResult] = []

    def run() -> None:
        start.wait(timeout=30)
        results.append(write())

    threads = [threading.Thread(target=run) for _ in range(copies)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    return results
