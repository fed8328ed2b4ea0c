"""The local Spark cluster's pure parts: worker addresses and finding a process's children."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from service.dev.spark_cluster import (
    LocalSparkCluster,
    SparkClusterError,
    children_of,
    command_line,
    spark_home,
    worker_host,
)


def test_each_worker_gets_its_own_loopback_address_when_asked() -> None:
    assert [worker_host(i, True) for i in range(3)] == ["127.0.0.2", "127.0.0.3", "127.0.0.4"]
    assert worker_host(1, False) == "127.0.0.1"


def test_a_cluster_plans_distinct_free_ports_before_it_starts(tmp_path: Path) -> None:
    cluster = LocalSparkCluster(workers=2, distinct_hosts=False, workdir=tmp_path)
    ports = [cluster.master.port, cluster.master.ui_port]
    ports += [port for w in cluster.workers for port in (w.port, w.ui_port)]
    assert len(set(ports)) == len(ports)
    assert cluster.master_url == f"spark://127.0.0.1:{cluster.master.port}"


def test_a_cluster_needs_a_worker_with_a_core() -> None:
    with pytest.raises(SparkClusterError, match="at least 1 worker"):
        LocalSparkCluster(workers=0)


def test_pysparks_own_installation_carries_spark_class_and_jars() -> None:
    home = spark_home()
    assert (home / "bin" / "spark-class").is_file()
    assert any((home / "jars").glob("spark-core_*.jar"))


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_children_are_found_by_parent_pid() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        assert child.pid in children_of(os.getpid())
        assert command_line(child.pid)[1:3] == ["-c", "import time; time.sleep(30)"]
    finally:
        child.kill()
        child.wait()
    assert child.pid not in children_of(os.getpid())
