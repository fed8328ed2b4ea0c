"""`dstreams dev spark`: prints the master URL, runs until interrupted, stops what it started.

The cluster itself is replaced by a recording stand-in here; the cluster tier starts real ones.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from service.cli import dev
from service.dev.spark_cluster import SparkClusterError


class RecordingCluster:
    """Stands in for LocalSparkCluster: records the calls, starts nothing."""

    made: list[RecordingCluster] = []
    fail_start = False

    def __init__(self, workers: int, cores: int, memory: str) -> None:
        self.shape = (workers, cores, memory)
        self.calls: list[str] = []
        self.master_url = "spark://127.0.0.1:17077"
        self.workdir = Path("/tmp/spark-cluster")
        self.workers = [type("W", (), {"host": f"127.0.0.{i + 2}"})() for i in range(workers)]
        RecordingCluster.made.append(self)

    def start(self) -> None:
        self.calls.append("start")
        if self.fail_start:
            msg = "the worker did not start"
            raise SparkClusterError(msg)

    def stop(self) -> None:
        self.calls.append("stop")


@pytest.fixture
def cluster(monkeypatch: pytest.MonkeyPatch) -> type[RecordingCluster]:
    RecordingCluster.made, RecordingCluster.fail_start = [], False
    monkeypatch.setattr(dev, "LocalSparkCluster", RecordingCluster)

    def interrupted(_seconds: float) -> Any:
        raise KeyboardInterrupt

    monkeypatch.setattr(dev.time, "sleep", interrupted)
    return RecordingCluster


def test_prints_the_master_url_and_stops_on_ctrl_c(cluster: type[RecordingCluster]) -> None:
    result = CliRunner().invoke(dev.dev, ["spark", "--workers", "3", "--memory", "2g"])
    assert result.exit_code == 0, result.output
    assert "spark://127.0.0.1:17077" in result.stdout.splitlines()
    (made,) = cluster.made
    assert made.shape == (3, 1, "2g")
    assert made.calls == ["start", "stop"]


def test_a_failed_start_is_reported_and_cleaned_up(cluster: type[RecordingCluster]) -> None:
    cluster.fail_start = True
    result = CliRunner().invoke(dev.dev, ["spark"])
    assert result.exit_code == 1
    assert "the worker did not start" in result.output
    assert cluster.made[0].calls == ["start", "stop"]
