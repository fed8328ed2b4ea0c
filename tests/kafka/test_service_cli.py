"""The `dstreams` command line against a real run: help, config, journal and version.

One word-count run on the local broker (module scope) writes the journal the `journal` commands
read, first while the driver runs (they must not disturb it) and then after its graceful stop.
Every command runs as a subprocess, exactly as a person would type it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from confluent_kafka import Producer

from service import __version__
from service.dev.brokers import create_topic
from service.dev.service_process import REPO_ROOT, ServiceProcess
from service.journal.base import JournalState
from service.journal.file import HEADER, FileJournal, scan_frames

PARTITIONS = 2
LINES_PER_PARTITION = 60
RATE_PER_PARTITION = 20  # with 1 s batches: the lines span three batches per partition
RUN_TIMEOUT_S = 180

COMMANDS = [
    (),
    ("run",),
    ("version",),
    ("demo",),
    ("config",),
    ("config", "validate"),
    ("config", "show"),
    ("config", "schema"),
    ("journal",),
    ("journal", "show"),
    ("journal", "verify"),
    ("audit",),
    ("dev",),
    ("dev", "kafka"),
    ("ingest",),
]


@dataclass
class Run:
    service: ServiceProcess
    topic: str
    journal: Path
    show_while_running: subprocess.CompletedProcess[str]
    verify_while_running: subprocess.CompletedProcess[str]
    completed_after_reads: int
    exit_code: int


# The console script pip installed next to this interpreter: what a person runs.
DSTREAMS = Path(sys.executable).parent / "dstreams"


def dstreams(*args: str) -> subprocess.CompletedProcess[str]:
    """`dstreams ARGS` as a subprocess; never raises on a non-zero exit."""
    assert DSTREAMS.exists(), f"{DSTREAMS} is missing; install the project (make venv)"
    return subprocess.run(
        [str(DSTREAMS), *args],
        cwd=REPO_ROOT,
        env={**os.environ, "COLUMNS": "100"},
        capture_output=True,
        text=True,
        timeout=120,
    )


def config_for(bootstrap: str, topic: str, workdir: Path) -> dict[str, Any]:
    return {
        "app_id": "wordcount-cli",
        "job": "examples.wordcount:build",
        "batch_interval_ms": 1000,
        "default_partitions": 2,
        "kafka": {"bootstrap_servers": bootstrap, "require_replication": False},
        "sources": {
            "lines": {
                "topics": [topic],
                "starting_offsets": "earliest",
                "codec": "utf-8",
                "max_rate_per_partition": RATE_PER_PARTITION,
            }
        },
        "sinks": {"counts": {"type": "files", "path": str(workdir / "out")}},
        "journal": {"type": "file", "path": str(workdir / "state" / "journal")},
    }


@pytest.fixture(scope="module")
def run(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    workdir = tmp_path_factory.mktemp("service-cli")
    topic = create_topic(kafka_bootstrap, f"cli_lines_{uuid.uuid4().hex[:8]}", PARTITIONS)
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    for i in range(PARTITIONS * LINES_PER_PARTITION):
        producer.produce(topic, f"line {i} of the cli run".encode(), partition=i % PARTITIONS)
    assert producer.flush(30) == 0
    produced = PARTITIONS * LINES_PER_PARTITION
    journal = workdir / "state" / "journal"
    with ServiceProcess(config_for(kafka_bootstrap, topic, workdir), workdir) as service:
        service.start()
        service.wait_for(
            lambda s: s["totals"]["records_in"] == produced and s["totals"]["completed"] >= 5,
            RUN_TIMEOUT_S,
            f"all {produced} lines read",
        )
        # Read-only commands while the driver runs: they must neither fence nor disturb it.
        show = dstreams("journal", "show", "--file", str(journal))
        verify = dstreams("journal", "verify", "--file", str(journal))
        after = service.completed_batches()
        service.wait_for(
            lambda s: s["totals"]["completed"] >= after + 2, 60, "two more batches after reads"
        )
        code = service.terminate()
        yield Run(service, topic, journal, show, verify, after, code)


# --- help ------------------------------------------------------------------------------------


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c) or "dstreams")
def test_help_exits_0_and_shows_examples(command: tuple[str, ...]) -> None:
    result = dstreams(*command, "--help")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("Usage: dstreams")
    assert "Example" in result.stdout, result.stdout
    assert result.stderr == ""


def test_version_prints_the_version() -> None:
    result = dstreams("version")
    assert result.returncode == 0
    assert result.stdout.strip() == __version__


# --- config ----------------------------------------------------------------------------------


def test_config_validate_accepts_the_run_s_config(run: Run) -> None:
    result = dstreams("config", "validate", "--config", str(run.service.config_path))
    assert (result.returncode, result.stdout, result.stderr) == (0, "ok\n", "")


def test_config_validate_names_each_problem_on_its_own_line(run: Run, tmp_path: Path) -> None:
    bad = yaml.safe_load(run.service.config_path.read_text())
    bad["sinks"]["counts"] = {"type": "kafak", "topic": "counts"}
    bad["batch_interval_ms"] = -5
    bad["sources"]["lines"]["max_rate_per_partition"] = "fast"
    bad["sources"]["lines"]["colour"] = "blue"
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(bad))
    result = dstreams("config", "validate", "--config", str(path))
    assert result.returncode == 2
    assert result.stdout == ""
    assert "Traceback" not in result.stderr
    problems = result.stderr.splitlines()
    assert len(problems) == 4, problems
    assert "sinks.counts.type: 'kafak' is not one of kafka, postgres, files, console" in problems
    fields = ["batch_interval_ms", "sources.lines.max_rate_per_partition", "sources.lines.colour"]
    for field in fields:
        assert any(line.startswith(field + ":") for line in problems), (field, problems)


def test_config_validate_of_a_missing_file_exits_2_without_traceback(tmp_path: Path) -> None:
    result = dstreams("config", "validate", "--config", str(tmp_path / "nowhere.yaml"))
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert len(result.stderr.splitlines()) == 1


def test_config_schema_is_json_schema_of_the_settings() -> None:
    result = dstreams("config", "schema")
    assert result.returncode == 0
    schema = json.loads(result.stdout)
    assert schema["$schema"].startswith("https://json-schema.org/")
    assert {"app_id", "job", "kafka", "sources", "sinks", "backpressure"} <= set(
        schema["properties"]
    )


# --- journal ---------------------------------------------------------------------------------


def journal_state(path: Path) -> JournalState:
    return JournalState.from_records(FileJournal(path).read())


def test_journal_commands_did_not_disturb_the_running_driver(run: Run) -> None:
    assert run.show_while_running.returncode == 0, run.show_while_running.stderr
    assert run.verify_while_running.returncode == 0, run.verify_while_running.stderr
    assert "epoch:          1" in run.show_while_running.stdout
    # The driver kept completing batches afterwards, in its first epoch, and stopped cleanly.
    assert run.exit_code == 0, run.service.log_tail()
    state = journal_state(run.journal)
    assert state.epoch == 1
    assert len(state.completed) >= run.completed_after_reads + 2


def test_journal_show_lists_epochs_and_last_batches(run: Run) -> None:
    state = journal_state(run.journal)
    last_planned, last_completed = state.last_planned, state.last_completed
    assert last_planned is not None and last_completed is not None
    result = dstreams("journal", "show", "--file", str(run.journal))
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert f"records:        {len(state.records)}" in out
    assert "epoch:          1" in out
    assert "  epoch 1      started " in out
    assert f"last planned:   batch {last_planned.batch_time} " in out
    assert f"last completed: batch {last_completed.batch_time} " in out
    assert "pending:        none" in out
    expected = ", ".join(f"{run.topic}-{p}={LINES_PER_PARTITION}" for p in range(PARTITIONS))
    assert f"next offsets:   {expected}" in out

    as_json = dstreams("journal", "show", "--file", str(run.journal), "--json")
    assert as_json.returncode == 0, as_json.stderr
    summary = json.loads(as_json.stdout)
    assert summary["epoch"] == 1
    assert summary["last_completed"]["batch_time"] == last_completed.batch_time
    assert summary["pending"] == []
    assert summary["positions"] == {f"{run.topic}-{p}": LINES_PER_PARTITION for p in range(2)}


def test_journal_verify_accepts_the_journal_of_the_run(run: Run) -> None:
    result = dstreams("journal", "verify", "--file", str(run.journal))
    assert result.returncode == 0, result.stderr
    state = journal_state(run.journal)
    assert f"ok — {len(state.records)} records, epoch 1" in result.stdout


def test_audit_of_the_run_finds_every_line_planned_exactly_once(run: Run) -> None:
    result = dstreams("audit", "--config", str(run.service.config_path))
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    for partition in range(PARTITIONS):
        covered = f"  {run.topic}-{partition}: offsets [0, {LINES_PER_PARTITION}) in "
        assert any(line.startswith(covered) for line in lines), result.stdout
    assert "input offsets: each planned exactly once" in lines
    # The run's one output goes to a files sink: every completed batch is checked there.
    counts = [line for line in lines if line.startswith("  counts (files): ")]
    assert len(counts) == 1 and counts[0].endswith(" completed batches, checked"), result.stdout
    assert not any(line.startswith("VIOLATION") for line in lines), result.stdout


def test_journal_verify_names_the_offset_of_damage_in_the_middle(run: Run, tmp_path: Path) -> None:
    copy = tmp_path / "journal"
    shutil.copyfile(run.journal, copy)
    data = bytearray(copy.read_bytes())
    frames = scan_frames(bytes(data), copy).records
    assert len(frames) >= 5
    offset = frames[len(frames) // 2][0]
    data[offset + HEADER.size + 8] ^= 0x20  # one flipped bit inside the record's JSON body
    copy.write_bytes(bytes(data))

    result = dstreams("journal", "verify", "--file", str(copy))
    assert result.returncode != 0
    assert f"byte {offset}" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr
    shown = dstreams("journal", "show", "--file", str(copy))
    assert shown.returncode != 0
    assert f"byte {offset}" in shown.stderr
    # The original is untouched and still verifies.
    assert dstreams("journal", "verify", "--file", str(run.journal)).returncode == 0


def test_journal_show_of_a_missing_file_says_what_to_give(tmp_path: Path) -> None:
    result = dstreams("journal", "show", "--file", str(tmp_path / "absent"))
    assert result.returncode == 2
    assert "no journal file at" in result.stderr
    assert "Traceback" not in result.stderr
