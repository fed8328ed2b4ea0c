"""One real run of the word-count service on the local broker, seen only from outside.

The module starts `dstreams run` once (a subprocess, Spark in local mode), produces known lines
and checks what the service says about them: the probes, `/metrics` (parsed by prometheus-client,
linted by promtool, scraped by a real Prometheus), the status page in headless Chromium, and canary
secrets that must never show. Tests run in file order; the last one stops the service.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from service import __version__, testing
from service.dev.brokers import create_topic
from service.dev.ports import free_port
from service.dev.service_process import REPO_ROOT, ServiceProcess
from service.graph.functions import words_of
from service.journal.base import JournalState
from service.journal.file import FileJournal
from sinks.files import FileSink

PARTITIONS = 3
LINES_PER_PARTITION = 200
# Offsets per partition per 1 s batch, so the lines span a few batches.
RATE_PER_PARTITION = 100
VOCABULARY = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", "iota"]
# Generous: Spark starts on 2 shared cores next to other test runs.
START_TIMEOUT_S = 120
CATCH_UP_TIMEOUT_S = 120
# Every canary secret carries this token; it must never be shown anywhere.
CANARY_TOKEN = "canary" + uuid.uuid4().hex[:12]


@dataclass
class Run:
    service: ServiceProcess
    topic: str
    lines: dict[int, list[str]]
    readyz_codes: list[int]
    completed_when_ready: int
    journal_path: Path
    out_path: Path
    env: dict[str, str]
    startupz: list[tuple[int, bytes]] = field(default_factory=list)
    """/startupz's replies while the service started, each asked just before /readyz."""


# --- helpers ---------------------------------------------------------------------------------


def http_get(port: int, path: str, accept: str | None = None) -> tuple[int, bytes] | None:
    """(status, body) of GET `path` on the service, or None while nothing answers."""
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}")  # noqa: S310 - loopback
    if accept:
        request.add_header("Accept", accept)
    try:
        with urllib.request.urlopen(request, timeout=5) as reply:  # noqa: S310 - loopback
            return int(reply.status), bytes(reply.read())
    except urllib.error.HTTPError as error:
        return int(error.code), bytes(error.read())
    except OSError:
        return None


def produce_lines(bootstrap: str, topic: str) -> dict[int, list[str]]:
    return testing.produce_lines(
        bootstrap, topic, PARTITIONS, LINES_PER_PARTITION, VOCABULARY, seed=5
    )


def samples(exposition: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    """Sample name -> [(labels, value)], parsed by prometheus-client's own parser."""
    found: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(exposition):
        for sample in family.samples:
            found.setdefault(sample.name, []).append((dict(sample.labels), sample.value))
    return found


def metric_samples(run: Run) -> dict[str, list[tuple[dict[str, str], float]]]:
    reply = http_get(run.service.port, "/metrics")
    assert reply is not None and reply[0] == 200
    return samples(reply[1].decode())


def caught_up(found: dict[str, list[tuple[dict[str, str], float]]], produced: int) -> bool:
    records = sum(value for _, value in found.get("dstreams_input_records_total", []))
    lags = [value for _, value in found.get("dstreams_consumer_lag_records", [])]
    return records == produced and len(lags) == PARTITIONS and not any(lags)


def wait_until(condition: Any, timeout_s: float, what: str, service: ServiceProcess) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not service.running():
            pytest.fail(f"the service exited before {what}\n{service.log_tail()}")
        if condition():
            return
        time.sleep(0.2)
    pytest.fail(f"timed out after {timeout_s}s waiting for {what}\n{service.log_tail()}")


def run_tool(
    args: list[str], timeout_s: float = 120, stdin: bytes | None = None
) -> subprocess.CompletedProcess[bytes]:
    """Runs a tool in a session of its own. Afterwards (done, timed out or interrupted) whatever
    is left of that session's process group, e.g. a browser's helper processes, is killed by
    its PGID, which is the tool's PID: only processes this call started."""
    process = subprocess.Popen(
        args,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        out, err = process.communicate(stdin, timeout=timeout_s)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        if process.poll() is None:
            process.communicate()
    return subprocess.CompletedProcess(args, process.returncode, out, err)


def dstreams(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "service", *args],
        cwd=REPO_ROOT,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=120,
    )


# --- the run ---------------------------------------------------------------------------------


def service_config(bootstrap: str, topic: str, workdir: Path) -> dict[str, Any]:
    unused_dsn = f"postgresql://dstreams:{CANARY_TOKEN}-dsn@127.0.0.1:1/unused"
    return {
        "app_id": "wordcount-http",
        "job": "examples.wordcount:build",
        "batch_interval_ms": 1000,
        "default_partitions": 3,
        "kafka": {
            "bootstrap_servers": bootstrap,
            "require_replication": False,
            # Accepted and unused by librdkafka on a PLAINTEXT connection: the run still works.
            "secret_properties": {"ssl.key.password": f"{CANARY_TOKEN}-ssl-key"},
        },
        "spark": {"secret_conf": {"spark.dstreams.test.password": f"{CANARY_TOKEN}-spark"}},
        "sources": {
            "lines": {
                "topics": [topic],
                "starting_offsets": "earliest",
                "codec": "utf-8",
                "max_rate_per_partition": RATE_PER_PARTITION,
            }
        },
        "sinks": {
            "counts": {"type": "files", "path": str(workdir / "out")},
            # Configured but not written by the job: its DSN only has to stay secret.
            "unused": {
                "type": "postgres",
                "dsn": unused_dsn,
                "table": "unused",
                "columns": ["word", "n"],
            },
        },
        "journal": {"type": "file", "path": str(workdir / "state" / "journal")},
        "logging": {"format": "json", "level": "INFO"},
    }


@pytest.fixture(scope="module")
def run(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    workdir = tmp_path_factory.mktemp("service-http")
    topic = create_topic(kafka_bootstrap, f"http_lines_{uuid.uuid4().hex[:8]}", PARTITIONS)
    # One canary comes from the environment, as a Kubernetes Secret would provide it.
    env = {"DSTREAMS_KAFKA__SASL_PASSWORD": f"{CANARY_TOKEN}-sasl"}
    service = ServiceProcess(service_config(kafka_bootstrap, topic, workdir), workdir, env=env)
    with service:
        service.start()
        codes: list[int] = []
        startupz: list[tuple[int, bytes]] = []

        def ready() -> bool:
            started = http_get(service.port, "/startupz")
            if started is not None:
                startupz.append(started)
            reply = http_get(service.port, "/readyz")
            if reply is not None:
                codes.append(reply[0])
            return bool(codes) and codes[-1] == 200

        wait_until(ready, START_TIMEOUT_S, "/readyz to turn 200", service)
        completed = service.completed_batches()
        lines = produce_lines(kafka_bootstrap, topic)
        produced = PARTITIONS * LINES_PER_PARTITION
        run = Run(
            service,
            topic,
            lines,
            codes,
            completed,
            workdir / "state" / "journal",
            workdir / "out",
            env,
            startupz,
        )
        wait_until(
            lambda: caught_up(metric_samples(run), produced),
            CATCH_UP_TIMEOUT_S,
            f"all {produced} lines read and consumer lag 0",
            service,
        )
        yield run
        # `with service` kills it if a test failed before the graceful stop at the end.


# --- probes ----------------------------------------------------------------------------------


def test_readyz_is_503_before_the_first_batch_and_200_after_it(run: Run) -> None:
    assert run.readyz_codes[0] == 503, run.readyz_codes
    assert set(run.readyz_codes[:-1]) == {503}
    assert run.readyz_codes[-1] == 200
    assert run.completed_when_ready >= 1
    assert http_get(run.service.port, "/readyz") == (200, b"ready\n")


def test_startupz_waits_for_the_first_batch_after_recovery(run: Run) -> None:
    """Kubernetes' startup probe: 503 through Spark's start and recovery, 200 once running."""
    before = run.startupz[:-1]  # each asked before a /readyz that was still 503
    assert before and {status for status, _ in before} == {503}, run.startupz
    assert all(body.startswith(b"starting: ") for _, body in before)
    status, body = http_get(run.service.port, "/startupz") or (0, b"")
    assert status == 200 and body.startswith(b"started: running for "), body


def test_healthz_is_200_while_batches_run(run: Run) -> None:
    reply = http_get(run.service.port, "/healthz")
    assert reply is not None
    status, body = reply
    assert status == 200
    assert body.startswith(b"ok: scheduler heartbeat")
    assert b"; running for " in body  # the phase, for a person reading the probe


# --- /metrics --------------------------------------------------------------------------------


def test_metrics_parse_and_pass_promtool(run: Run) -> None:
    reply = http_get(run.service.port, "/metrics")
    assert reply is not None and reply[0] == 200
    found = samples(reply[1].decode())
    assert any(name.startswith("dstreams_") for name in found)
    promtool = shutil.which("promtool")
    assert promtool, "promtool is missing; run devtools/ensure-sysdeps.sh (Debian: prometheus)"
    checked = run_tool([promtool, "check", "metrics"], timeout_s=60, stdin=reply[1])
    report = (checked.stdout + checked.stderr).decode()
    assert checked.returncode == 0, report
    assert report.strip() == "", report
    # The OpenMetrics form, as a Prometheus negotiating it receives, parses as well.
    openmetrics = http_get(run.service.port, "/metrics", accept="application/openmetrics-text")
    assert openmetrics is not None and openmetrics[1].rstrip().endswith(b"# EOF")


def test_metric_values_agree_with_what_the_run_did(run: Run) -> None:
    found = metric_samples(run)
    produced = sum(len(lines) for lines in run.lines.values())
    by_partition = {
        labels["partition"]: value
        for labels, value in found["dstreams_input_records_total"]
        if labels["topic"] == run.topic
    }
    assert by_partition == {str(p): float(len(run.lines[p])) for p in range(PARTITIONS)}
    assert sum(by_partition.values()) == produced
    batches = {labels["outcome"]: value for labels, value in found["dstreams_batches_total"]}
    assert batches["completed"] > 0
    assert batches["failed"] == 0
    assert found["dstreams_epoch"] == [({}, 1.0)]
    lags = {labels["partition"]: value for labels, value in found["dstreams_consumer_lag_records"]}
    assert lags == {str(p): 0.0 for p in range(PARTITIONS)}
    assert found["dstreams_build_info"] == [({"version": __version__}, 1.0)]
    assert found["dstreams_last_completed_batch_timestamp_seconds"][0][1] > 0

    # Output records: per batch, the distinct words of exactly the ranges that batch planned.
    state = JournalState.from_records(FileJournal(run.journal_path).read())
    expected_rows = 0
    for t, completed in state.completed.items():
        words: set[str] = set()
        for r in state.planned[t].ranges:
            for line in run.lines[r.partition][r.from_offset : r.until_offset]:
                words.update(words_of(line))
        assert completed.outputs.get("counts", 0) == len(words), f"batch {t}"
        expected_rows += len(words)
    outputs = {labels["output"]: value for labels, value in found["dstreams_output_records_total"]}
    assert outputs["counts"] == expected_rows
    assert sum(1 for c in state.completed.values() if c.outputs.get("counts")) >= 2

    # And the sink holds every word exactly once in total.
    sink = FileSink(run.out_path)
    counted: Counter[str] = Counter()
    for t in sink.committed_batches("counts"):
        for word, count in sink.read_batch("counts", t):
            counted[word] += count
    assert counted == Counter(w for ls in run.lines.values() for line in ls for w in words_of(line))


def test_status_breaks_each_batch_down_and_measures_end_to_end_latency(run: Run) -> None:
    status = run.service.status() or {}
    read = [b for b in status["batches"] if b["outcome"] == "completed" and b["records_in"]]
    assert read, status["batches"]
    for batch in read:
        breakdown = batch["breakdown"]
        assert list(breakdown["steps"])[:3] == ["plan", "journal_planned", "run_outputs"]
        counts = breakdown["outputs"]["counts"]
        assert counts["jobs"] and all(job["tasks"] >= 1 for job in counts["jobs"])
        assert breakdown["steps"]["run_outputs"] <= batch["processing_s"]
        # The records were produced before the batch that read them committed.
        latency = batch["end_to_end_s"]
        assert 0 <= latency["min"] <= latency["max"]
    found = metric_samples(run)
    steps = {labels["step"] for labels, _ in found["dstreams_batch_step_seconds_count"]}
    assert {"plan", "journal_planned", "spark_job", "sink_write", "sink_commit"} <= steps
    latency_counts = {
        labels["output"]: value
        for labels, value in found["dstreams_end_to_end_latency_seconds_count"]
    }
    assert latency_counts["counts"] == sum(1 for b in read if b["outputs"].get("counts"))


# --- a real Prometheus -----------------------------------------------------------------------


@pytest.fixture
def prometheus(run: Run, tmp_path: Path) -> Iterator[str]:
    """Debian's Prometheus scraping the service every second; yields its base URL."""
    binary = shutil.which("prometheus") or "/usr/bin/prometheus"
    assert Path(binary).exists(), "prometheus is missing; run devtools/ensure-sysdeps.sh"
    config = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "scrape_configs": [
            {
                "job_name": "dstreams",
                "static_configs": [{"targets": [f"127.0.0.1:{run.service.port}"]}],
            }
        ],
    }
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
    port = free_port()
    args = [
        binary,
        f"--config.file={tmp_path / 'prometheus.yml'}",
        f"--storage.tsdb.path={tmp_path / 'tsdb'}",
        f"--web.listen-address=127.0.0.1:{port}",
        "--log.level=warn",
    ]
    with open(tmp_path / "prometheus.log", "wb") as log:
        process = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while prometheus_get(base, "/-/ready") is None:
            assert process.poll() is None, (tmp_path / "prometheus.log").read_text()
            assert time.monotonic() < deadline, "Prometheus did not become ready in 60 s"
            time.sleep(0.2)
        yield base
    finally:
        process.terminate()  # SIGTERM to the PID started above
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def prometheus_get(base: str, path: str) -> bytes | None:
    try:
        with urllib.request.urlopen(base + path, timeout=5) as reply:  # noqa: S310 - loopback
            return bytes(reply.read())
    except OSError:
        return None


def promql(base: str, query: str) -> list[dict[str, Any]]:
    body = prometheus_get(base, "/api/v1/query?" + urllib.parse.urlencode({"query": query}))
    if body is None:
        return []
    reply = json.loads(body)
    assert reply["status"] == "success", reply
    result: list[dict[str, Any]] = reply["data"]["result"]
    return result


def test_a_real_prometheus_scrapes_the_input_rate(run: Run, prometheus: str) -> None:
    query = "rate(dstreams_input_records_total[15s])"
    deadline = time.monotonic() + 90
    result = promql(prometheus, query)
    while not result:
        assert time.monotonic() < deadline, f"{query} returned no data within 90 s"
        time.sleep(0.5)
        result = promql(prometheus, query)
    target = f"127.0.0.1:{run.service.port}"
    for series in result:
        labels = series["metric"]
        assert set(labels) == {"job", "instance", "topic", "partition"}, labels
        assert labels["job"] == "dstreams" and labels["instance"] == target
        assert labels["topic"] == run.topic
    assert {s["metric"]["partition"] for s in result} <= {str(p) for p in range(PARTITIONS)}
    up = promql(prometheus, 'up{job="dstreams"}')
    assert [s["value"][1] for s in up] == ["1"]
    total = promql(prometheus, "sum(dstreams_input_records_total)")
    assert float(total[0]["value"][1]) == PARTITIONS * LINES_PER_PARTITION


# --- the status page -------------------------------------------------------------------------


def chromium_args(user_data: Path) -> list[str]:
    binary = shutil.which("chromium")
    assert binary, "chromium is missing; run devtools/ensure-sysdeps.sh"
    return [
        binary,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-dev-shm-usage",
        # No name resolves except the service's loopback address: the page must need nothing else.
        "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1",
        f"--user-data-dir={user_data}",
        "--window-size=1280,900",
        "--virtual-time-budget=5000",
    ]


def polyline_points(dom: str, chart: str) -> list[tuple[float, float]]:
    svg = re.search(rf'<svg[^>]*id="{chart}"[^>]*>(.*?)</svg>', dom, re.DOTALL)
    assert svg, f"no <svg id={chart}> in the page"
    line = re.search(r'<polyline[^>]*points="([^"]*)"', svg.group(1))
    assert line, f"the {chart} chart has no line drawn"
    return [(float(x), float(y)) for x, y in (p.split(",") for p in line.group(1).split())]


def test_status_page_draws_the_timeline_in_headless_chromium(run: Run, tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{run.service.port}/"
    screenshot = tmp_path / "status.png"
    shot = run_tool([*chromium_args(tmp_path / "profile-shot"), f"--screenshot={screenshot}", url])
    assert shot.returncode == 0, shot.stderr.decode(errors="replace")[-3000:]
    png = screenshot.read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = int.from_bytes(png[16:20], "big"), int.from_bytes(png[20:24], "big")
    assert (width, height) == (1280, 900)
    assert len(png) > 20_000  # three charts, cards and a table; a blank page is a few KB

    dumped = run_tool([*chromium_args(tmp_path / "profile-dom"), "--dump-dom", url])
    assert dumped.returncode == 0, dumped.stderr.decode(errors="replace")[-3000:]
    dom = dumped.stdout.decode()
    assert not re.search(r"<(script|link|img)[^>]+(src|href)=", dom)  # nothing loaded from outside
    updated = re.search(r'id="updated">([^<]*)<', dom)
    assert updated and updated.group(1).startswith("updated "), updated  # /status was fetched
    status = run.service.status() or {}
    batches = len(status["batches"])
    for chart in ("rate", "processing", "delay"):
        points = polyline_points(dom, chart)
        assert len(points) >= 2
        assert len(points) <= batches + 5  # one point per batch, a few batches ago or since
    # The input-rate line leaves the zero axis where the produced lines were read.
    rate = polyline_points(dom, "rate")
    assert len({y for _, y in rate}) > 1
    assert polyline_points(dom, "latency")  # end-to-end latency of the batches that read
    breakdown = re.search(r'<svg[^>]*id="breakdown"[^>]*>(.*?)</svg>', dom, re.DOTALL)
    assert breakdown and "<rect" in breakdown.group(1)  # stacked steps per batch
    assert dom.count('class="outcome ok">completed</td>') >= 1
    assert "wordcount-http" in dom


# --- secrets ---------------------------------------------------------------------------------


def test_canary_secrets_never_appear(run: Run) -> None:
    shown = {path: http_get(run.service.port, path) for path in ("/status", "/metrics", "/")}
    for path, reply in shown.items():
        assert reply is not None and reply[0] == 200
        assert CANARY_TOKEN.encode() not in reply[1], path

    config = str(run.service.config_path)
    for fmt in ("yaml", "json"):
        result = dstreams("config", "show", "--config", config, "--format", fmt, env=run.env)
        assert result.returncode == 0, result.stderr
        assert "**********" in result.stdout
        assert CANARY_TOKEN not in result.stdout + result.stderr, fmt
    # The secret fields were set (so masking, not absence, keeps them out).
    shown_config = json.loads(
        dstreams("config", "show", "--config", config, "--format", "json", env=run.env).stdout
    )
    assert shown_config["kafka"]["sasl_password"] == "**********"

    # An invalid file still names its problems without revealing the secrets in it.
    bad = yaml.safe_load(run.service.config_path.read_text())
    bad["batch_interval_ms"] = "soon"
    bad["kafka"]["secret_properties"]["ssl.key.password"] = [f"{CANARY_TOKEN}-in-a-list"]
    bad_path = run.service.workdir / "bad.yaml"
    bad_path.write_text(yaml.safe_dump(bad))
    result = dstreams("config", "validate", "--config", str(bad_path), env=run.env)
    assert result.returncode == 2
    assert "batch_interval_ms" in result.stderr
    assert CANARY_TOKEN not in result.stdout + result.stderr

    assert CANARY_TOKEN.encode() not in run.journal_path.read_bytes()
    assert CANARY_TOKEN not in run.service.log_path.read_text(errors="replace")


def test_graceful_stop_exits_0_and_logs_no_secret(run: Run) -> None:
    assert run.service.terminate() == 0
    log = run.service.log_path.read_text(errors="replace")
    assert CANARY_TOKEN not in log
    assert "Traceback" not in log
    messages = [json.loads(line) for line in log.splitlines() if line.startswith("{")]
    assert any(m["message"] == "stopped gracefully" for m in messages)
    batch_lines = [m for m in messages if m["message"].startswith("batch ")]
    assert batch_lines and all(m["app"] == "wordcount-http" for m in batch_lines)
    assert all(m["epoch"] == 1 and "batch_time" in m for m in batch_lines)
