"""SIGTERM during a batch: the running batch completes and commits, then the driver exits 0."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from confluent_kafka import Producer

from service.dev.service_process import ServiceProcess
from service.journal.base import JournalState
from service.journal.file import FileJournal
from service.testing import group_offsets
from sinks.files import FileSink

LINES = 300
SLEEP_MS = 20  # per record: a batch of 300 lines takes seconds, long enough to stop mid-way


def test_sigterm_mid_batch_completes_that_batch_and_exits_zero(
    kafka_bootstrap: str, make_topic: Any, unique_name: str, tmp_path: Path
) -> None:
    topic = make_topic(kafka_bootstrap, unique_name, partitions=1)
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    for i in range(LINES):
        producer.produce(topic, f"line {i}".encode())
    assert producer.flush(30) == 0
    config = {
        "app_id": unique_name.replace("_", "-")[:40],
        "job": "examples.slow_job:build",
        "kafka": {"bootstrap_servers": kafka_bootstrap, "require_replication": False},
        "sources": {"lines": {"topics": [topic], "starting_offsets": "earliest", "codec": "utf-8"}},
        "sinks": {"lines_out": {"type": "files", "path": str(tmp_path / "out")}},
        "journal": {"type": "file", "path": str(tmp_path / "journal")},
    }
    service = ServiceProcess(config, tmp_path, env={"DSTREAMS_SLOW_JOB_SLEEP_MS": str(SLEEP_MS)})
    with service:
        service.start()
        status = service.wait_for(
            lambda s: any(
                b["outcome"] == "running" and b["planned_records"] > 0 for b in s["batches"]
            ),
            timeout_s=180,
            what="a batch with records to be running",
        )
        running = next(b for b in status["batches"] if b["outcome"] == "running")
        exit_code = service.terminate()

    assert exit_code == 0, service.log_tail()
    assert "finishing the running batch" in service.log_path.read_text()
    state = JournalState.from_records(FileJournal(tmp_path / "journal").read())
    assert running["batch_time"] in state.completed
    assert state.pending() == []
    sink = FileSink(tmp_path / "out")
    assert running["batch_time"] in sink.committed_batches("lines_out")
    written = [
        row for t in sink.committed_batches("lines_out") for row in sink.read_batch("lines_out", t)
    ]
    assert len(written) == LINES
    assert sorted(written) == sorted(f"line {i}" for i in range(LINES))
    # Lag tools read the group's committed offsets; the group is the app id by default.
    assert group_offsets(kafka_bootstrap, config["app_id"], topic, 1) == {0: LINES}
