"""The HTTP endpoint on an ephemeral port: every route, the probes, and promtool on /metrics."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from connectors.offsets import OffsetRange
from service.config.settings import load_settings
from service.observe.http import HttpServer
from service.observe.metrics import Metrics
from service.observe.status import StatusBoard

CANARY = "canary-Ht4vB9"


class FakeClock:
    def __init__(self) -> None:
        self.now = 500.0

    def __call__(self) -> float:
        return self.now


@dataclass
class Running:
    base: str
    board: StatusBoard
    metrics: Metrics
    clock: FakeClock


@pytest.fixture
def running() -> Iterator[Running]:
    clock = FakeClock()
    board = StatusBoard("wordcount", 1000, clock=clock)
    metrics = Metrics()
    server = HttpServer(board, metrics, "127.0.0.1", 0)
    port = server.start()
    assert port > 0
    try:
        yield Running(f"http://127.0.0.1:{port}", board, metrics, clock)
    finally:
        server.stop()


def get(url: str, accept: str | None = None) -> tuple[int, dict[str, str], str]:
    # Loopback http URLs built by the test itself, so S310's scheme concern does not apply.
    request = urllib.request.Request(url, headers={"Accept": accept} if accept else {})  # noqa: S310
    try:
        with urllib.request.urlopen(request, timeout=10) as response:  # noqa: S310
            return response.status, dict(response.headers), response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), error.read().decode()


def run_one_batch(r: Running) -> None:
    r.board.set_epoch(1)
    r.metrics.set_epoch(1)
    r.board.batch_started(1_700_000_000_000, [OffsetRange("words", 0, 0, 12)], 0.03)
    r.metrics.add_input_records("words", 0, 12)
    r.metrics.add_output_records("counts", 5)
    r.board.batch_finished(1_700_000_000_000, 12, {"counts": 5}, 0.4, "completed")
    r.metrics.batch_completed("completed", 0.4, 0.03, batch_time_ms=1_700_000_000_000)


def test_metrics_parse_and_agree_with_what_happened(running: Running) -> None:
    run_one_batch(running)
    status, headers, body = get(running.base + "/metrics")
    assert status == 200 and headers["Content-Type"].startswith("text/plain; version=0.0.4")
    values = {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(body)
        for sample in family.samples
    }
    assert values[("dstreams_input_records_total", (("partition", "0"), ("topic", "words")))] == 12
    assert values[("dstreams_batches_total", (("outcome", "completed"),))] == 1
    assert values[("dstreams_epoch", ())] == 1
    assert any(name == "process_cpu_seconds_total" for name, _ in values)


def test_metrics_speak_openmetrics_when_asked(running: Running) -> None:
    status, headers, body = get(
        running.base + "/metrics", accept="application/openmetrics-text; version=1.0.0"
    )
    assert status == 200
    assert headers["Content-Type"].startswith("application/openmetrics-text")
    assert body.rstrip().endswith("# EOF")


def test_promtool_finds_nothing_to_complain_about(running: Running) -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool missing: `make sysdeps` (Debian package prometheus) installs it")
    run_one_batch(running)
    _, _, body = get(running.base + "/metrics")
    checked = subprocess.run(
        [promtool, "check", "metrics"], input=body, capture_output=True, text=True, timeout=60
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert checked.stdout.strip() == "" and checked.stderr.strip() == ""


def test_readyz_flips_after_set_ready(running: Running) -> None:
    status, _, body = get(running.base + "/readyz")
    assert status == 503 and body.startswith("not ready")
    running.board.set_ready(True)
    status, _, body = get(running.base + "/readyz")
    assert (status, body) == (200, "ready\n")


def test_healthz_turns_503_when_the_scheduler_is_wedged(running: Running) -> None:
    running.board.heartbeat()
    status, _, body = get(running.base + "/healthz")
    assert status == 200 and body.startswith("ok")
    running.clock.now += 120
    status, _, body = get(running.base + "/healthz")
    assert status == 503 and "wedged" in body
    running.board.heartbeat()
    assert get(running.base + "/healthz")[0] == 200


def test_startupz_waits_for_the_first_batch_after_recovery(running: Running) -> None:
    status, _, body = get(running.base + "/startupz")
    assert status == 503 and body.startswith("starting: starting for")
    running.board.set_phase("recovering")
    running.clock.now += 600  # a long recovery: /healthz says so in its body
    running.board.batch_finished(1_000, 0, {}, 0.1, "replayed")
    status, _, body = get(running.base + "/startupz")
    assert (status, body) == (503, "starting: recovering for 600s, 1 batches replayed so far\n")
    running.board.heartbeat()
    status, _, body = get(running.base + "/healthz")
    assert status == 200 and body.endswith("; recovering for 600s, 1 batches replayed so far\n")
    running.board.set_ready(True)
    status, _, body = get(running.base + "/startupz")
    assert (status, body) == (200, "started: running for 0s\n")


def test_status_is_the_board_snapshot(running: Running) -> None:
    run_one_batch(running)
    status, headers, body = get(running.base + "/status?ignored=1")
    assert status == 200 and headers["Content-Type"] == "application/json"
    snapshot = json.loads(body)
    assert snapshot["app"] == "wordcount" and snapshot["epoch"] == 1
    (batch,) = snapshot["batches"]
    assert batch["records_in"] == 12 and batch["outputs"] == {"counts": 5}
    assert batch["ranges"] == [{"topic": "words", "partition": 0, "from": 0, "until": 12}]


def test_status_page_is_self_contained(running: Running) -> None:
    status, headers, body = get(running.base + "/")
    assert status == 200 and headers["Content-Type"].startswith("text/html")
    assert "default-src 'none'" in headers["Content-Security-Policy"]
    assert "<svg" in body and 'fetch("status"' in body
    # No asset from anywhere: no src/href attributes, no CSS imports or url() references.
    assert not re.search(r"""\b(src|href)\s*=|@import|url\(""", body)


def test_unknown_path_is_404(running: Running) -> None:
    status, _, body = get(running.base + "/nope")
    assert status == 404 and "/metrics" in body


def test_no_secret_reaches_any_endpoint(tmp_path: Path) -> None:
    config = tmp_path / "job.yaml"
    config.write_text(
        "app_id: wordcount\njob: m:f\n"
        f"kafka: {{bootstrap_servers: b:9092, sasl_password: {CANARY}}}\n"
        "sources: {words: {topics: [words]}}\n"
        f"sinks: {{pg: {{type: postgres, dsn: 'postgresql://u:{CANARY}@h/d', table: t, "
        "columns: [a]}}\n"
    )
    settings = load_settings(config, {})
    # Wired the way the engine does: the board and metrics get names, offsets and counts only.
    board = StatusBoard(settings.app_id, settings.batch_interval_ms)
    metrics = Metrics()
    server = HttpServer(board, metrics, "127.0.0.1", 0)
    base = f"http://127.0.0.1:{server.start()}"
    try:
        run_one_batch(Running(base, board, metrics, FakeClock()))
        for name in settings.sinks:
            board.batch_finished(1_700_000_001_000, 1, {name: 1}, 0.1, "completed")
            metrics.add_output_records(name, 1)
        for path in ("/", "/status", "/metrics", "/healthz", "/readyz", "/startupz"):
            assert CANARY not in get(base + path)[2]
    finally:
        server.stop()


def test_stop_releases_the_port() -> None:
    server = HttpServer(StatusBoard("wc", 1000), Metrics(process_metrics=False), "127.0.0.1", 0)
    port = server.start()
    server.stop()
    server.stop()  # idempotent
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2)  # noqa: S310
    again = HttpServer(StatusBoard("wc", 1000), Metrics(process_metrics=False), "127.0.0.1", port)
    assert again.start() == port
    again.stop()
