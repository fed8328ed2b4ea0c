"""Stopping the local Kafka cluster: only its own brokers, by PID; data kept means a clean stop."""

from __future__ import annotations

from pathlib import Path

from service.dev.kafka_cluster import LocalKafkaCluster


def _alive(pid: int) -> bool:
    return Path(f"/proc/{pid}").exists()


def test_a_throwaway_cluster_is_killed_and_its_directory_removed() -> None:
    cluster = LocalKafkaCluster(brokers=1)
    cluster.start()
    pids, workdir = cluster.broker_pids, cluster.workdir
    assert len(pids) == 1 and all(_alive(pid) for pid in pids)

    cluster.stop()

    assert not any(_alive(pid) for pid in pids)
    assert not workdir.exists()
    assert cluster.broker_pids == []


def test_a_cluster_whose_data_is_kept_shuts_down_in_order(tmp_path: Path) -> None:
    cluster = LocalKafkaCluster(brokers=1, workdir=tmp_path)
    cluster.start()
    pids = cluster.broker_pids
    log = tmp_path / "broker-0" / "broker.log"
    # Only a controlled shutdown (SIGTERM) gets as far as logging this; a SIGKILL never does.
    shutdown_done = "shut down completely"
    assert shutdown_done not in log.read_text()

    cluster.stop()

    assert not any(_alive(pid) for pid in pids)
    assert (tmp_path / "broker-0" / "data").is_dir()
    assert shutdown_done in log.read_text()
