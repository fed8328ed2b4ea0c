"""Backpressure on a real run: a deliberately slow job over a preloaded backlog, twice.

`examples.slow_job` sleeps per record, and the configured maximum rate lets each batch take more
records than the job can process in one interval. Without backpressure every batch overruns, so
the scheduling delay grows batch after batch; with it, the PID controller lowers the rate until
batches fit the interval again and the delay stops growing and drains. Both runs read the same
backlog for the same number of batches; only the direction is asserted, never a time.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from confluent_kafka import Producer
from prometheus_client.parser import text_string_to_metric_families

from service.dev.brokers import create_topic
from service.dev.service_process import ServiceProcess

PARTITIONS = 2
INTERVAL_MS = 2000
# Per partition: 1200 records per 2 s batch. At 2 ms each on two task slots, a full batch needs
# about 1.2 s of sleeping plus the batch's fixed cost, more than the interval on any machine.
MAX_RATE_PER_PARTITION = 600
SLEEP_PER_RECORD_MS = 2
# Batches with data compared per run; the backlog outlasts them in both runs.
BATCHES = 8
BACKLOG_PER_PARTITION = 2 * BATCHES * MAX_RATE_PER_PARTITION * INTERVAL_MS // 1000
RUN_TIMEOUT_S = 150
# examples.slow_job.SLEEP_ENV; `examples` is not an installed package, so it is not imported here.
SLEEP_ENV = "DSTREAMS_SLOW_JOB_SLEEP_MS"


@dataclass
class Observed:
    delays: list[float]
    planned: list[int]
    rate_limit: float | None


def preload(bootstrap: str, topic: str) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20})
    for i in range(BACKLOG_PER_PARTITION * PARTITIONS):
        producer.produce(topic, f"line {i % 101}".encode(), partition=i % PARTITIONS)
        if i % 10_000 == 0:
            producer.poll(0)
    assert producer.flush(60) == 0


def config(bootstrap: str, topic: str, workdir: Path, backpressure: bool) -> dict[str, Any]:
    return {
        "app_id": f"slow-{'on' if backpressure else 'off'}",
        "job": "examples.slow_job:build",
        "batch_interval_ms": INTERVAL_MS,
        "default_partitions": PARTITIONS,
        "kafka": {"bootstrap_servers": bootstrap, "require_replication": False},
        "sources": {
            "lines": {
                "topics": [topic],
                "starting_offsets": "earliest",
                "codec": "utf-8",
                "max_rate_per_partition": MAX_RATE_PER_PARTITION,
                "min_partitions": PARTITIONS,
            }
        },
        "sinks": {"lines_out": {"type": "files", "path": str(workdir / "out")}},
        "journal": {"type": "file", "path": str(workdir / "state" / "journal")},
        # A floor far below what the job manages, so the controller is free to find the rate.
        "backpressure": {"enabled": backpressure, "min_rate": 10},
        "logging": {"format": "json", "level": "INFO"},
    }


def with_data(status: dict[str, Any]) -> list[dict[str, Any]]:
    """Completed batches that read records, oldest first."""
    done = [b for b in status["batches"] if b["outcome"] == "completed" and b["records_in"]]
    return sorted(done, key=lambda b: b["batch_time"])


def rate_limit(exposition: str) -> float | None:
    for family in text_string_to_metric_families(exposition):
        for sample in family.samples:
            if sample.name == "dstreams_rate_limit_records_per_second":
                assert sample.labels == {"source": "lines"}
                return float(sample.value)
    return None


def observe_run(bootstrap: str, topic: str, workdir: Path, backpressure: bool) -> Observed:
    settings = config(bootstrap, topic, workdir, backpressure)
    env = {SLEEP_ENV: str(SLEEP_PER_RECORD_MS)}
    with ServiceProcess(settings, workdir, env=env) as service:
        service.start()
        status = service.wait_for(
            lambda s: len(with_data(s)) >= BATCHES, RUN_TIMEOUT_S, f"{BATCHES} batches with data"
        )
        metrics = service.get("/metrics")
        assert metrics is not None
        assert service.terminate() == 0, service.log_tail()
    batches = with_data(status)[:BATCHES]
    return Observed(
        delays=[b["scheduling_delay_s"] for b in batches],
        planned=[b["planned_records"] for b in batches],
        rate_limit=rate_limit(metrics.decode()),
    )


def test_backpressure_stops_scheduling_delay_growing(
    kafka_bootstrap: str, tmp_path: Path, unique_name: str
) -> None:
    topic = create_topic(kafka_bootstrap, unique_name, PARTITIONS)
    preload(kafka_bootstrap, topic)
    off = observe_run(kafka_bootstrap, topic, tmp_path / "off", backpressure=False)
    on = observe_run(kafka_bootstrap, topic, tmp_path / "on", backpressure=True)
    report = f"delays off: {off.delays}\ndelays on:  {on.delays}\nplanned on: {on.planned}"
    full_batch = PARTITIONS * MAX_RATE_PER_PARTITION * INTERVAL_MS // 1000
    middle = BATCHES // 2
    print(report)  # shown with -rP: how far from the edge each direction was

    # Without backpressure every batch is full and the delay keeps growing to the end.
    assert off.planned == [full_batch] * BATCHES, report
    assert off.delays[-1] > off.delays[middle] > off.delays[1], report
    assert off.rate_limit == MAX_RATE_PER_PARTITION  # only the configured maximum is in force

    # With it, batches shrink below the maximum and the delay stops growing: its peak lies in
    # the first half of the run and it ends lower than it was at the peak.
    assert on.planned[0] == full_batch and min(on.planned[1:]) < full_batch, report
    assert max(on.delays[middle:]) <= max(on.delays[:middle]), report
    assert on.delays[-1] < max(on.delays), report
    assert on.rate_limit is not None and on.rate_limit < MAX_RATE_PER_PARTITION

    # And compared with each other over the same batches: less delay, and it grows less.
    assert on.delays[-1] < off.delays[-1], report
    assert on.delays[-1] - on.delays[middle] < off.delays[-1] - off.delays[middle], report
