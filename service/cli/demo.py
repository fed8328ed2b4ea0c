"""`make demo`: word count on a local Kafka, live progress, graceful stop, exactly-once audit.

1. Start (or reuse) a Kafka broker and create the input topic.
2. Start the service as a subprocess with 1 s batches, the files sink and a file journal.
3. Produce generated lines for a while, showing batches done, records/s and lag.
4. Wait until every produced line is counted, send SIGTERM, and check the exit code.
5. Read the sink back and compare every word's total with what was produced.
6. `dstreams audit` the run: every offset planned once, every completed batch committed.
"""

from __future__ import annotations

import random
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

from service.graph.functions import words_of
from sinks.files import FileSink

if TYPE_CHECKING:
    from service.dev.service_process import ServiceProcess

TOPIC = "demo-lines"
PARTITIONS = 4
VOCABULARY = [f"w{i:04d}" for i in range(2000)]
CATCH_UP_TIMEOUT_S = 120


def run_demo(seconds: int, rate: int) -> int:
    from service.dev.brokers import create_topic, kafka_endpoint
    from service.dev.service_process import ServiceProcess

    with kafka_endpoint(brokers=1) as bootstrap, tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        create_topic(bootstrap, TOPIC, partitions=PARTITIONS)
        service = ServiceProcess(demo_config(workdir, bootstrap), workdir, name="wordcount")
        print(f"status page: http://127.0.0.1:{service.port}/   metrics: .../metrics")
        with service:
            service.start()
            produced = produce_for(bootstrap, seconds, rate, service)
            wait_until_counted(workdir, produced)
            code = service.terminate()
        print(f"service exited with code {code}")
        audit = audit_line(workdir, produced)
        print(audit)
        audited = audit_run(service.config_path)
        return 0 if code == 0 and "duplicates=0 missing=0" in audit and audited else 1


def demo_config(workdir: Path, bootstrap: str) -> dict[str, Any]:
    return {
        "app_id": "wordcount-demo",
        "job": "examples.wordcount:build",
        "batch_interval_ms": 1000,
        "kafka": {"bootstrap_servers": bootstrap, "require_replication": False},
        "sources": {"lines": {"topics": [TOPIC], "starting_offsets": "earliest", "codec": "utf-8"}},
        "sinks": {"counts": {"type": "files", "path": str(workdir / "out")}},
        "journal": {"type": "file", "path": str(workdir / "state" / "journal")},
        "logging": {"format": "text", "level": "WARNING"},
    }


def produce_for(bootstrap: str, seconds: int, rate: int, service: ServiceProcess) -> Counter[str]:
    """Produces about `rate` lines/s for `seconds`, printing progress every 2 s."""
    from connectors.kafka_client import new_idempotent_producer

    producer = new_idempotent_producer({"bootstrap.servers": bootstrap})
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
            report_progress(service, lines)
            next_report += 2
    if producer.flush(30) != 0:
        msg = "the demo producer could not deliver every line within 30 s"
        raise RuntimeError(msg)
    produced["\0lines"] = lines
    return produced


def report_progress(service: ServiceProcess, produced_lines: int) -> None:
    status = service.status()
    if status is None:
        print(f"produced {produced_lines:>8} lines; service starting...")
        return
    batches = [b for b in status.get("batches", []) if b.get("outcome") == "completed"]
    recent = batches[-5:]
    seconds = sum(b.get("processing_s") or 0 for b in recent) or 1.0
    records = sum(b.get("records_in") or 0 for b in recent)
    totals = status.get("totals", {})
    print(
        f"produced {produced_lines:>8} lines | batches done {totals.get('completed', 0):>4} | "
        f"{records / seconds:>9.0f} records/s while busy | "
        f"lag {produced_lines - totals.get('records_in', 0):>7}"
    )


def counted_words(workdir: Path) -> Counter[str]:
    sink = FileSink(workdir / "out")
    counts: Counter[str] = Counter()
    for batch_time in sink.committed_batches("counts"):
        for word, count in sink.read_batch("counts", batch_time):
            counts[word] += count
    return counts


def wait_until_counted(workdir: Path, produced: Counter[str]) -> None:
    expected = sum(n for w, n in produced.items() if not w.startswith("\0"))
    deadline = time.monotonic() + CATCH_UP_TIMEOUT_S
    while time.monotonic() < deadline:
        if sum(counted_words(workdir).values()) >= expected:
            return
        time.sleep(1)
    print(f"warning: the service did not count every word within {CATCH_UP_TIMEOUT_S}s")


def audit_run(config: Path) -> bool:
    """`dstreams audit` of the run, as a user would type it; True when it found no violation."""
    command = [sys.executable, "-m", "service", "audit", "--config", str(config)]
    print("$ dstreams audit --config " + str(config), flush=True)
    return subprocess.run(command, check=False).returncode == 0  # noqa: S603 - our own CLI


def audit_line(workdir: Path, produced: Counter[str]) -> str:
    lines = produced.pop("\0lines", 0)
    counted = counted_words(workdir)
    duplicates = sum(max(0, counted[w] - produced[w]) for w in counted)
    missing = sum(max(0, produced[w] - counted[w]) for w in produced)
    return (
        f"audit: input_records={lines} words={sum(produced.values())} "
        f"counted_words={sum(counted.values())} duplicates={duplicates} missing={missing}"
    )
