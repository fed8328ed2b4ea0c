"""`make demo`: word count on a local Kafka, live progress, graceful stop, exactly-once audit.

1. Start (or reuse) a Kafka broker and create the input topic.
2. Start the service as a subprocess with 1 s batches, the files sink and a file journal.
3. Produce generated lines for a while, showing batches done, records/s and lag.
4. Wait until every produced line is counted, send SIGTERM, and check the exit code.
5. Read the sink back and compare every word's total with what was produced.
"""

from __future__ import annotations

import json
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections import Counter
from pathlib import Path
from typing import Any

import yaml

from service.functions import words_of
from sinks.files import FileSink

TOPIC = "demo-lines"
PARTITIONS = 4
VOCABULARY = [f"w{i:04d}" for i in range(2000)]
CATCH_UP_TIMEOUT_S = 120


def run_demo(seconds: int, rate: int) -> int:
    from service.dev.brokers import create_topic, kafka_endpoint

    with kafka_endpoint(brokers=1) as bootstrap, tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        create_topic(bootstrap, TOPIC, partitions=PARTITIONS)
        port = _free_port()
        config = write_config(workdir, bootstrap, port)
        print(f"status page: http://127.0.0.1:{port}/   metrics: http://127.0.0.1:{port}/metrics")
        service = start_service(config, workdir)
        try:
            produced = produce_for(bootstrap, seconds, rate, port)
            wait_until_counted(workdir, produced, port)
        finally:
            code = stop_service(service)
        print(f"service exited with code {code}")
        audit = audit_line(workdir, produced)
        print(audit)
        return 0 if code == 0 and "duplicates=0 missing=0" in audit else 1


def write_config(workdir: Path, bootstrap: str, port: int) -> Path:
    config = {
        "app_id": "wordcount-demo",
        "job": "examples.wordcount:build",
        "batch_interval_ms": 1000,
        "kafka": {"bootstrap_servers": bootstrap},
        "sources": {"lines": {"topics": [TOPIC], "starting_offsets": "earliest", "codec": "utf-8"}},
        "sinks": {"counts": {"type": "files", "path": str(workdir / "out")}},
        "journal": {"type": "file", "path": str(workdir / "state" / "journal")},
        "http": {"host": "127.0.0.1", "port": port},
        "logging": {"format": "text", "level": "WARNING"},
    }
    path = workdir / "wordcount.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def start_service(config: Path, workdir: Path) -> subprocess.Popen[bytes]:
    log = open(workdir / "service.log", "wb")  # noqa: SIM115 - lives as long as the process
    root = Path(__file__).resolve().parent.parent
    return subprocess.Popen(  # noqa: S603 - our own interpreter and module
        [sys.executable, "-m", "service", "run", "--config", str(config)],
        cwd=root,
        stdout=log,
        stderr=subprocess.STDOUT,
        env={**os.environ, "PYTHONHASHSEED": "0"},
    )


def produce_for(bootstrap: str, seconds: int, rate: int, port: int) -> Counter[str]:
    """Produces about `rate` lines/s for `seconds`, printing progress every 2 s."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    rng = random.Random(42)  # noqa: S311 - demo text, not security
    produced: Counter[str] = Counter()
    lines = 0
    started = time.monotonic()
    next_report = started + 2
    while time.monotonic() - started < seconds:
        tick = time.monotonic()
        for _ in range(rate // 10):
            line = " ".join(rng.choice(VOCABULARY) for _ in range(8))
            producer.produce(TOPIC, line.encode())
            produced.update(words_of(line))
            lines += 1
        producer.poll(0)
        time.sleep(max(0.0, 0.1 - (time.monotonic() - tick)))
        if time.monotonic() >= next_report:
            report_progress(port, lines)
            next_report += 2
    if producer.flush(30) != 0:
        msg = "the demo producer could not deliver every line within 30 s"
        raise RuntimeError(msg)
    produced["\0lines"] = lines
    return produced


def report_progress(port: int, produced_lines: int) -> None:
    status = fetch_status(port)
    if status is None:
        print(f"produced {produced_lines:>8} lines; service starting...")
        return
    batches = [b for b in status.get("batches", []) if b.get("outcome") == "completed"]
    recent = batches[-5:]
    seconds = sum(b.get("processing_s") or 0 for b in recent) or 1.0
    records = sum(b.get("records_in") or 0 for b in recent)
    consumed = status.get("totals", {}).get("records_in", 0)
    print(
        f"produced {produced_lines:>8} lines | batches done {len(batches):>4} | "
        f"{records / seconds:>9.0f} records/s while busy | lag {produced_lines - consumed:>7}"
    )


def fetch_status(port: int) -> dict[str, Any] | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/status", timeout=2) as reply:  # noqa: S310
            data: dict[str, Any] = json.load(reply)
            return data
    except OSError as error:
        print("status fetch failed:", repr(error))
        return None


def counted_words(workdir: Path) -> Counter[str]:
    sink = FileSink(workdir / "out")
    counts: Counter[str] = Counter()
    for batch_time in sink.committed_batches("counts"):
        for word, count in sink.read_batch("counts", batch_time):
            counts[word] += count
    return counts


def wait_until_counted(workdir: Path, produced: Counter[str], port: int) -> None:
    expected = sum(n for w, n in produced.items() if not w.startswith("\0"))
    deadline = time.monotonic() + CATCH_UP_TIMEOUT_S
    while time.monotonic() < deadline:
        if sum(counted_words(workdir).values()) >= expected:
            return
        time.sleep(1)
    print(f"warning: the service did not count every word within {CATCH_UP_TIMEOUT_S}s")


def stop_service(service: subprocess.Popen[bytes]) -> int:
    if service.poll() is None:
        service.send_signal(signal.SIGTERM)
        try:
            return service.wait(timeout=60)
        except subprocess.TimeoutExpired:
            service.kill()
            service.wait()
            return -9
    return service.returncode


def audit_line(workdir: Path, produced: Counter[str]) -> str:
    lines = produced.pop("\0lines", 0)
    counted = counted_words(workdir)
    duplicates = sum(max(0, counted[w] - produced[w]) for w in counted)
    missing = sum(max(0, produced[w] - counted[w]) for w in produced)
    return (
        f"audit: input_records={lines} words={sum(produced.values())} "
        f"counted_words={sum(counted.values())} duplicates={duplicates} missing={missing}"
    )


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])
