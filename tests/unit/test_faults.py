"""Crash points are inert unless named, and kill the process (no exception) when reached;
straggle points slow only the first attempt of the named task."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from service import faults


def run_point(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    code = (
        "from service import faults\n"
        "for _ in range(3):\n"
        "    faults.crash_point('before-ack')\n"
        "    print('passed', flush=True)\n"
    )
    return subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=False
    )


def test_unnamed_point_is_inert() -> None:
    faults.crash_point("before-ack")  # must simply return


def test_named_point_exits_like_a_kill(monkeypatch: object) -> None:
    import os

    env = {**os.environ, "DSTREAMS_CRASH_AT": "before-ack", "DSTREAMS_CRASH_AFTER": "2"}
    result = run_point(env)
    assert result.returncode == faults.CRASH_EXIT_CODE
    assert result.stdout.count("passed") == 1
    assert "before-ack" in result.stderr


def test_straggle_points_slow_only_the_named_partitions_first_attempt(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    slept: list[float] = []
    monkeypatch.setattr(faults.time, "sleep", slept.append)
    monkeypatch.setenv("DSTREAMS_STRAGGLE_AT", "task-after-write")
    monkeypatch.setenv("DSTREAMS_STRAGGLE_PARTITION", "2")
    monkeypatch.setenv("DSTREAMS_STRAGGLE_S", "7.5")
    faults.straggle_point("task-before-write", 2, 0)  # another point
    faults.straggle_point("task-after-write", 1, 0)  # another partition
    faults.straggle_point("task-after-write", 2, 1)  # a copy of the task runs at full speed
    assert slept == []
    faults.straggle_point("task-after-write", 2, 0)
    assert slept == [7.5]


def test_unnamed_straggle_point_is_inert(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DSTREAMS_STRAGGLE_AT", raising=False)
    monkeypatch.setattr(faults.time, "sleep", lambda _s: pytest.fail("slept"))
    faults.straggle_point("task-before-write", 0, 0)


def test_crash_once_lets_only_the_first_process_die(tmp_path: Path) -> None:
    import os

    claim = tmp_path / "crashed-once"
    env = {**os.environ, "DSTREAMS_CRASH_AT": "before-ack", "DSTREAMS_CRASH_ONCE": str(claim)}
    first, second = run_point(env), run_point(env)
    assert first.returncode == faults.CRASH_EXIT_CODE
    assert first.stdout.count("passed") == 0
    assert second.returncode == 0
    assert second.stdout.count("passed") == 3
    assert claim.exists()
