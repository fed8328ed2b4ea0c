"""No silent loss, end to end: with no dead-letter topic an undecodable record stops the service
naming its topic, partition and offset; with `on_decode_error: skip` it is counted and skipped.

Both runs are `dstreams run` processes over the real broker, reading one topic in which one record
is not UTF-8.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from confluent_kafka import Producer
from prometheus_client.parser import text_string_to_metric_families

from service.dev.service_process import ServiceProcess
from service.driver.engine import EXIT_FAILED
from sinks.files import FileSink

MakeTopic = Callable[..., str]
LINES = [b"alpha beta", b"beta gamma", b"gamma", b"\xff\xfe not utf-8", b"alpha", b"beta"]
BAD_OFFSET = 3
# Generous bounds for a 2-core machine: Spark's start, four task attempts, the stop.
FAIL_TIMEOUT_S = 180
RUN_TIMEOUT_S = 180


def produce(bootstrap: str, topic: str) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for line in LINES:
        producer.produce(topic, line, partition=0)
    assert producer.flush(30) == 0


def config(bootstrap: str, topic: str, workdir: Path, **source: Any) -> dict[str, Any]:
    return {
        "app_id": f"decode-{workdir.name}",
        "job": "examples.wordcount:build",
        "batch_interval_ms": 1000,
        "default_partitions": 1,
        "kafka": {"bootstrap_servers": bootstrap, "require_replication": False},
        "sources": {
            "lines": {"topics": [topic], "starting_offsets": "earliest", "codec": "utf-8", **source}
        },
        "sinks": {"counts": {"type": "files", "path": str(workdir / "out")}},
        "journal": {"type": "file", "path": str(workdir / "journal")},
    }


def test_an_undecodable_record_stops_the_service_naming_its_offset(
    kafka_bootstrap: str, make_topic: MakeTopic, unique_name: str, tmp_path: Path
) -> None:
    topic = make_topic(kafka_bootstrap, unique_name)
    produce(kafka_bootstrap, topic)
    with ServiceProcess(config(kafka_bootstrap, topic, tmp_path / "fail"), tmp_path) as service:
        service.start()
        code = service.wait(FAIL_TIMEOUT_S)
        log = service.log_path.read_text(errors="replace")
    # A failure of a running service (exit 5), not a refusal to start; one line on stderr says so.
    assert code == EXIT_FAILED, service.log_tail()
    assert f"cannot decode the record at {topic}-0 offset {BAD_OFFSET}: not UTF-8" in log
    summary = next(line for line in log.splitlines() if line.startswith("dstreams failed"))
    assert summary.startswith("dstreams failed while running: connectors.reader.UndecodableRecord")
    assert f"{topic}-0 offset {BAD_OFFSET}" in summary
    assert "dstreams refused to start" not in log
    assert "set one to keep such records aside" in log
    # Nothing of the failed batch was committed.
    assert FileSink(tmp_path / "fail" / "out").committed_batches("counts") == []


def test_skip_counts_the_undecodable_record_and_counts_the_rest(
    kafka_bootstrap: str, make_topic: MakeTopic, unique_name: str, tmp_path: Path
) -> None:
    topic = make_topic(kafka_bootstrap, unique_name)
    produce(kafka_bootstrap, topic)
    workdir = tmp_path / "skip"
    with ServiceProcess(
        config(kafka_bootstrap, topic, workdir, on_decode_error="skip"), tmp_path
    ) as service:
        service.start()
        service.wait_for(
            lambda status: status.get("totals", {}).get("records_in", 0) >= len(LINES),
            RUN_TIMEOUT_S,
            "every record to be read",
        )
        metrics = (service.get("/metrics") or b"").decode()
        assert service.terminate() == 0, service.log_tail()
        log = service.log_path.read_text(errors="replace")

    errors = {
        sample.labels["topic"]: sample.value
        for family in text_string_to_metric_families(metrics)
        for sample in family.samples
        if sample.name == "dstreams_decode_errors_total"
    }
    assert errors == {topic: 1.0}
    assert f"cannot decode {topic}-0 offset {BAD_OFFSET}: not UTF-8" in log
    sink = FileSink(workdir / "out")
    totals: Counter[str] = Counter()
    for batch_time in sink.committed_batches("counts"):
        totals.update({word: n for word, n in sink.read_batch("counts", batch_time)})
    good = [line.decode() for i, line in enumerate(LINES) if i != BAD_OFFSET]
    assert totals == Counter(word for line in good for word in line.split())
