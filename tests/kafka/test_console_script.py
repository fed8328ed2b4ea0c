"""The `dstreams` console script finds a job module in its working directory, or in `--app-dir`.

`python -m service` puts the working directory on the import path by itself; the console script
pip installs (what a person runs) does not, which made the README's `dstreams run --config
config/wordcount.yaml` exit 2 in a checkout. Here the job is a module of a temporary directory
that nothing else puts on the path: PYTHONPATH names only the project, as an installed package.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from confluent_kafka import Producer

from service.dev.service_process import REPO_ROOT, ServiceProcess
from sinks.files import FileSink

DSTREAMS = Path(sys.executable).parent / "dstreams"
LINES = [f"line {i}" for i in range(40)]
RUN_TIMEOUT_S = 180
JOB = """
def shout(line):
    return line.upper() + "!"


def build(ctx):
    ctx.source("lines").map(shout).write("shouted")
"""


def project_only_env() -> dict[str, str]:
    """This checkout's packages on the path (the venv's editable install may name another
    checkout), and nothing of the working directory."""
    return {**os.environ, "PYTHONPATH": str(REPO_ROOT), "COLUMNS": "100"}


def dstreams(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    assert DSTREAMS.exists(), f"{DSTREAMS} is missing; install the project (make venv)"
    return subprocess.run(  # noqa: S603 - the project's own console script
        [str(DSTREAMS), *args],
        cwd=cwd,
        env=project_only_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )


def job_config(bootstrap: str, topic: str, workdir: Path) -> dict[str, Any]:
    return {
        "app_id": f"console-{topic}",
        "job": "shouting:build",
        "batch_interval_ms": 1000,
        "default_partitions": 1,
        "kafka": {"bootstrap_servers": bootstrap, "require_replication": False},
        "sources": {"lines": {"topics": [topic], "starting_offsets": "earliest", "codec": "utf-8"}},
        "sinks": {"shouted": {"type": "files", "path": str(workdir / "out")}},
        "journal": {"type": "file", "path": str(workdir / "state" / "journal")},
    }


@pytest.fixture
def job_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "jobs"
    folder.mkdir()
    (folder / "shouting.py").write_text(JOB)
    return folder


def test_config_validate_imports_the_job_from_the_working_directory(
    job_dir: Path, tmp_path: Path
) -> None:
    config = job_dir / "job.yaml"
    config.write_text(yaml.safe_dump(job_config("127.0.0.1:1", "t", tmp_path)))
    found = dstreams(job_dir, "config", "validate", "--config", "job.yaml")
    assert (found.returncode, found.stdout, found.stderr) == (0, "ok\n", "")

    elsewhere = dstreams(tmp_path, "config", "validate", "--config", str(config))
    assert elsewhere.returncode == 2
    assert "cannot import module 'shouting'" in elsewhere.stderr
    assert "Traceback" not in elsewhere.stderr

    named = dstreams(tmp_path, "config", "validate", "--config", str(config), "--app-dir", "jobs")
    assert (named.returncode, named.stdout, named.stderr) == (0, "ok\n", "")


def test_run_finds_the_job_in_the_working_directory(
    kafka_bootstrap: str, make_topic: Any, unique_name: str, job_dir: Path, tmp_path: Path
) -> None:
    topic = make_topic(kafka_bootstrap, unique_name, partitions=1)
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    for line in LINES:
        producer.produce(topic, line.encode())
    assert producer.flush(30) == 0
    config = job_config(kafka_bootstrap, topic, tmp_path)
    with ServiceProcess(
        config, tmp_path, env=project_only_env(), program=[str(DSTREAMS)], cwd=job_dir
    ) as service:
        service.start()
        service.wait_for(
            lambda s: s["totals"]["records_in"] == len(LINES) and s["totals"]["completed"] >= 1,
            RUN_TIMEOUT_S,
            "every line read",
        )
        assert service.terminate() == 0, service.log_tail()
    sink = FileSink(tmp_path / "out")
    written = [
        row for t in sink.committed_batches("shouted") for row in sink.read_batch("shouted", t)
    ]
    # The job's own function ran in Spark's Python workers, which imported it too.
    assert sorted(written) == sorted(line.upper() + "!" for line in LINES)
