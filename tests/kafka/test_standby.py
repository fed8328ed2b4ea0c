"""Warm standby on the Kafka journal: two `dstreams run --standby` drivers as subprocesses.

The elected driver runs batches while the other waits with Spark up and takes no epoch; when the
active one is SIGKILLed the standby takes the next epoch and finishes the input with an exact word
count. A driver that was only paused (SIGSTOP) when the standby took over is fenced as soon as it
resumes and exits with code 3.
"""

from __future__ import annotations

import os
import re
import signal
import time
from collections import Counter
from pathlib import Path
from typing import Any

from service.dev.service_process import ServiceProcess
from service.driver.election import MEMBER_STARTED
from service.journal.base import JournalState
from service.journal.kafka import KafkaJournal
from service.journal.records import EpochRecord
from service.testing import group_offsets, produce_lines
from sinks.files import FileSink

PARTITIONS = 2
LINES_PER_PARTITION = 1_500
EXIT_FENCED = 3
WAIT_S = 180


def standby_config(bootstrap: str, topic: str, app_id: str, out: Path) -> dict[str, Any]:
    return {
        "app_id": app_id,
        "job": "examples.wordcount:build",
        "spark": {"master": "local[1]"},
        "kafka": {"bootstrap_servers": bootstrap, "require_replication": False},
        "sources": {
            "lines": {
                "topics": [topic],
                "starting_offsets": "earliest",
                "codec": "utf-8",
                # Several batches' worth, so the take-over lands with work still to do.
                "max_rate_per_partition": 150,
            }
        },
        "sinks": {"counts": {"type": "files", "path": str(out)}},
        "journal": {"type": "kafka", "topic": f"{app_id}.journal"},
        "standby": {"enabled": True},
    }


def start_pair(config: dict[str, Any], workdir: Path) -> tuple[ServiceProcess, ServiceProcess]:
    """Both drivers started together; returns (active, standby) once each shows its role."""
    first = ServiceProcess(config, workdir, name="first")
    second = ServiceProcess(config, workdir, name="second")
    first.start()
    second.start()
    try:
        first.wait_for(lambda s: _role(first, second) is not None, WAIT_S, "one driver elected")
        active = _role(first, second)
        assert active is not None
        standby = second if active is first else first
        standby.wait_for(lambda s: _waiting(standby), WAIT_S, "the standby to wait, warm")
    except BaseException:
        first.kill()
        second.kill()
        raise
    return active, standby


def _role(first: ServiceProcess, second: ServiceProcess) -> ServiceProcess | None:
    for driver in (first, second):
        if driver.completed_batches() >= 1:
            return driver
    return None


def _waiting(driver: ServiceProcess) -> bool:
    return "standby: waiting to become the active driver" in driver.log_path.read_text()


def journal_epochs(bootstrap: str, app_id: str) -> list[int]:
    journal = KafkaJournal({"bootstrap.servers": bootstrap}, f"{app_id}.journal", app_id, 1, 1)
    return sorted({r.epoch for r in journal.read()})


def assert_exact(bootstrap: str, app_id: str, out: Path, lines: dict[int, list[str]]) -> None:
    journal = KafkaJournal({"bootstrap.servers": bootstrap}, f"{app_id}.journal", app_id, 1, 1)
    records = journal.read()
    state = JournalState.from_records(records)
    state.validate()
    assert [r.epoch for r in records if isinstance(r, EpochRecord)] == [2]
    assert state.pending() == []
    sink = FileSink(out)
    counted: Counter[str] = Counter()
    for batch_time in sink.committed_batches("counts"):
        for word, count in sink.read_batch("counts", batch_time):
            counted[word] += count
    expected = Counter(word for part in lines.values() for line in part for word in line.split())
    assert counted == expected


def _setup(
    bootstrap: str, make_topic: Any, name: str, tmp_path: Path
) -> tuple[str, dict[int, list[str]], dict[str, Any]]:
    topic = make_topic(bootstrap, name, partitions=PARTITIONS)
    vocabulary = [f"w{i}" for i in range(20)]
    lines = produce_lines(bootstrap, topic, PARTITIONS, LINES_PER_PARTITION, vocabulary, 11)
    app_id = name.replace("_", "-")[:40]
    return app_id, lines, standby_config(bootstrap, topic, app_id, tmp_path / "out")


def test_standby_takes_over_after_sigkill_exactly(
    kafka_bootstrap: str, make_topic: Any, unique_name: str, tmp_path: Path
) -> None:
    app_id, lines, config = _setup(kafka_bootstrap, make_topic, unique_name, tmp_path)
    topic = config["sources"]["lines"]["topics"][0]
    ends = {p: LINES_PER_PARTITION for p in range(PARTITIONS)}
    active, standby = start_pair(config, tmp_path)
    with active, standby:
        # While the active driver lives, the standby takes no epoch and runs no batch.
        assert journal_epochs(kafka_bootstrap, app_id) == [1]
        assert (standby.status() or {}).get("epoch") is None
        # A waiting standby has started (Kubernetes' startup probe passes) but is not ready.
        waiting = standby.status() or {}
        assert (waiting.get("phase"), waiting.get("started"), waiting.get("ready")) == (
            "standby", True, False,
        )  # fmt: skip
        assert standby.completed_batches() == 0
        assert active.completed_batches() >= 1
        assert active.kill() == -signal.SIGKILL
        standby.wait_for(
            lambda s: (
                s.get("epoch") == 2
                and group_offsets(kafka_bootstrap, app_id, topic, PARTITIONS) == ends
            ),
            WAIT_S,
            "the standby to take over and read everything",
        )
        assert (standby.status() or {}).get("phase") == "running"
        assert standby.terminate() == 0, standby.log_tail()
    assert_exact(kafka_bootstrap, app_id, tmp_path / "out", lines)


def test_a_paused_active_driver_is_fenced_when_it_resumes(
    kafka_bootstrap: str, make_topic: Any, unique_name: str, tmp_path: Path
) -> None:
    app_id, lines, config = _setup(kafka_bootstrap, make_topic, unique_name, tmp_path)
    active, standby = start_pair(config, tmp_path)
    with active, standby:
        os.kill(active.pid, signal.SIGSTOP)  # silent, like a hung or partitioned driver
        try:
            standby.wait_for(lambda s: s.get("epoch") == 2, WAIT_S, "the standby's epoch")
        finally:
            os.kill(active.pid, signal.SIGCONT)
        assert active.wait(WAIT_S) == EXIT_FENCED, active.log_tail()
        read_everything_and_stop(standby, kafka_bootstrap, app_id, config)
    assert_exact(kafka_bootstrap, app_id, tmp_path / "out", lines)


def test_a_killed_drivers_group_member_leaves_at_once(
    kafka_bootstrap: str, make_topic: Any, unique_name: str, tmp_path: Path
) -> None:
    """With a ten-minute session timeout the brokers would wait that long for a silent member;
    a take-over within this test's wait shows that the killed driver's member process left the
    group when the driver died, and then ended."""
    app_id, lines, config = _setup(kafka_bootstrap, make_topic, unique_name, tmp_path)
    config["standby"]["session_timeout_ms"] = 600_000
    assert WAIT_S * 1000 < config["standby"]["session_timeout_ms"]
    active, standby = start_pair(config, tmp_path)
    with active, standby:
        found = re.search(rf"{MEMBER_STARTED} (\d+)", active.log_path.read_text())
        assert found is not None, active.log_tail()
        member = int(found.group(1))
        assert active.kill() == -signal.SIGKILL
        standby.wait_for(lambda s: s.get("epoch") == 2, WAIT_S, "the standby's epoch")
        assert _ended(member, WAIT_S), f"the killed driver's group member {member} lingers"
        read_everything_and_stop(standby, kafka_bootstrap, app_id, config)
    assert_exact(kafka_bootstrap, app_id, tmp_path / "out", lines)


def read_everything_and_stop(
    driver: ServiceProcess, bootstrap: str, app_id: str, config: dict[str, Any]
) -> None:
    """Waits until `driver` has read the whole input, then stops it gracefully."""
    topic = config["sources"]["lines"]["topics"][0]
    ends = {p: LINES_PER_PARTITION for p in range(PARTITIONS)}
    driver.wait_for(
        lambda s: group_offsets(bootstrap, app_id, topic, PARTITIONS) == ends,
        WAIT_S,
        "the driver to read everything",
    )
    assert driver.terminate() == 0, driver.log_tail()


def _ended(pid: int, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.1)
    return False
