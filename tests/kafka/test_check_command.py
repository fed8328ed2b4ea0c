"""`dstreams check --config`: the service's start-up checks without the service, against a real
broker. A good config passes (exit 0); a graph changed since its journal was written, a missing
ACL and an unreachable broker each fail their line, naming why, with the exit code `dstreams run`
would refuse to start with (4), the last within a bounded time."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml

from service.config.settings import Settings
from service.dev.brokers import create_topic
from service.dev.kafka_cluster import LocalKafkaCluster
from service.dev.kafka_security import add_scram_user, grant, service_grants
from service.dev.ports import free_port
from service.dev.service_process import REPO_ROOT
from service.driver.preflight import build_context
from service.driver.recovery import JournalLog
from service.graph.plan import BatchPlan
from service.journal.file import FileJournal

EXIT_REFUSED = 4
# Python and the job's imports take a few seconds, the brokers step waits at most 10 s.
CHECK_TIMEOUT_S = 120.0
STEPS = ("brokers", "credentials", "job", "acls", "storage", "replication", "sinks", "journal")


def job_config(
    app: str, kafka: dict[str, Any], tmp_path: Path, partitions: int = 2
) -> dict[str, Any]:
    """The word count (examples/wordcount.py) writing to Kafka, its journal in `tmp_path`."""
    return {
        "app_id": app,
        "job": "examples.wordcount:build",
        "default_partitions": partitions,
        "kafka": {"min_replication_factor": 1, "min_insync_replicas": 1, **kafka},
        "sources": {"lines": {"topics": [f"{app}.lines"]}},
        "sinks": {"counts": {"type": "kafka", "topic": f"{app}.counts"}},
        "journal": {"type": "file", "path": str(tmp_path / "state" / "journal")},
    }


def dstreams_check(config: dict[str, Any], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(config))
    return subprocess.run(
        [sys.executable, "-m", "service", "check", "--config", str(path)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=CHECK_TIMEOUT_S,
        check=False,
        env={**os.environ},
    )


def line_of(result: subprocess.CompletedProcess[str], step: str) -> str:
    """The line of `step`: its status padded to five characters, then its name."""
    [line] = [line for line in result.stdout.splitlines() if line[6:].startswith(f"{step}: ")]
    return line


def test_a_good_config_passes_every_check(
    kafka_bootstrap: str, unique_name: str, tmp_path: Path
) -> None:
    config = job_config(unique_name, {"bootstrap_servers": kafka_bootstrap}, tmp_path)
    create_topic(kafka_bootstrap, f"{unique_name}.lines", 2)
    result = dstreams_check(config, tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert [line.split(":")[0] for line in result.stdout.splitlines()[:-1]] == [
        f"ok    {step}" for step in STEPS
    ], result.stdout
    assert line_of(result, "journal").startswith("ok    journal: empty: a first start")
    assert result.stdout.splitlines()[-1] == "dstreams check: the service would start"
    assert not (tmp_path / "state").exists(), "check created the journal's folder"


def test_a_graph_changed_since_the_journal_was_written_is_refused_naming_the_change(
    kafka_bootstrap: str, unique_name: str, tmp_path: Path
) -> None:
    create_topic(kafka_bootstrap, f"{unique_name}.lines", 2)
    kafka = {"bootstrap_servers": kafka_bootstrap}
    settings = Settings.model_validate(job_config(unique_name, kafka, tmp_path))
    journal_batch_of(settings, tmp_path / "state" / "journal")
    changed = job_config(unique_name, kafka, tmp_path, partitions=3)
    result = dstreams_check(changed, tmp_path)
    assert result.returncode == EXIT_REFUSED, result.stdout + result.stderr
    journal = line_of(result, "journal")
    assert journal.startswith("FAIL  journal: GraphChanged: the job's graph changed"), journal
    assert "(reduce_by_key) partitions 2 -> 3" in journal
    assert "Traceback" not in result.stderr


def journal_batch_of(settings: Settings, path: Path) -> None:
    """One batch planned by the job of `settings`, as its driver would journal it at `path`."""
    ctx = build_context(settings)
    try:
        path.parent.mkdir(parents=True)
        with FileJournal(path, owner="test") as journal:
            log = JournalLog(journal, journal.open(), ctx.graph_json())
            log.journal_planned(BatchPlan(1000, {}), ctx.fingerprint())
    finally:
        ctx.close()


def test_a_missing_acl_is_refused_naming_it(
    secured_kafka: LocalKafkaCluster, unique_name: str, tmp_path: Path
) -> None:
    app, admin = unique_name, secured_kafka.bootstrap_servers
    create_topic(admin, f"{app}.lines", 2)
    user = f"u_{app}"
    password = add_scram_user(admin, user)
    grants = service_grants(app, (f"{app}.lines",), (f"{app}.counts",))
    grant(admin, f"User:{user}", [g for g in grants if g.resource != "group"])
    kafka = {
        "bootstrap_servers": secured_kafka.sasl_ssl_bootstrap_servers,
        "properties": secured_kafka.security.sasl_ssl_properties(user),
        "sasl_password": password,
    }
    result = dstreams_check(job_config(app, kafka, tmp_path), tmp_path)
    assert result.returncode == EXIT_REFUSED, result.stdout + result.stderr
    assert line_of(result, "credentials").startswith("ok    credentials: the brokers accept")
    acls = line_of(result, "acls")
    assert acls.startswith("FAIL  acls: KafkaAuthorizationError"), acls
    assert f"User:{user}" in acls and "--operation Read --group" in acls, acls
    assert password not in result.stdout + result.stderr


def test_an_unreachable_broker_fails_within_bounded_time(unique_name: str, tmp_path: Path) -> None:
    nobody = f"127.0.0.1:{free_port()}"
    started = time.monotonic()
    result = dstreams_check(
        job_config(unique_name, {"bootstrap_servers": nobody}, tmp_path), tmp_path
    )
    seconds = time.monotonic() - started
    assert result.returncode == EXIT_REFUSED, result.stdout + result.stderr
    brokers = line_of(result, "brokers")
    assert brokers.startswith(
        f"FAIL  brokers: BrokersUnreachable: no Kafka broker at {nobody} answered within 10 s"
    ), brokers
    for step in ("credentials", "replication", "sinks"):
        assert line_of(result, step).startswith(f"skip  {step}: needs brokers")
    assert line_of(result, "journal").startswith("ok    journal: empty")
    assert seconds < 60, f"the check took {seconds:.0f}s against an unreachable broker"
