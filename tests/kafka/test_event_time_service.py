"""One real run of the event-time job (`examples.late_clicks`) as a `dstreams run` subprocess:
out-of-order clicks with late ones, from a real broker into a real PostgreSQL.

Without deaths (the chaos test adds them): the table holds, for every (page, window), the value
and revision of the reference model fed with the journaled batches; the dead-letter topic holds
exactly the model's late clicks, as does the late-records metric; the status shows a watermark.
"""

from __future__ import annotations

import random
import re
from pathlib import Path
from typing import Any

import psycopg
from confluent_kafka import Consumer, Producer, TopicPartition

from examples.late_clicks import (
    LATENESS_MS,
    LENGTH_MS,
    PAGE_WINDOWS,
    SLACK_MS,
    parse_click,
    postgres_sink,
)
from service.dev.brokers import create_topic
from service.dev.service_process import ServiceProcess
from service.graph import functions
from service.graph.state_functions import constant_one
from service.journal.base import JournalState
from service.journal.file import FileJournal
from tests.spark import event_reference as reference

PARTITIONS = 2
CLICKS = 3000
RATE_PER_PARTITION = 300  # offsets per partition per 1 s batch: the clicks span ~5 batches


def clicks(seed: int) -> list[str]:
    rng = random.Random(seed)
    out = []
    for index in range(CLICKS):
        event = 1_000_000 + index * 10 + rng.randint(-300, 300)
        if rng.random() < 0.05:
            event -= rng.randint(12_000, 40_000)
        out.append(f"/p{rng.randrange(8)} {event}")
    return out


def produce(bootstrap: str, topic: str, lines: list[str]) -> dict[tuple[int, int], str]:
    where: dict[tuple[int, int], str] = {}
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for index, line in enumerate(lines):

        def delivered(error: Any, message: Any, line: str = line) -> None:
            assert error is None
            where[(message.partition(), message.offset())] = line

        producer.produce(topic, line.encode(), partition=index % PARTITIONS, on_delivery=delivered)
        producer.poll(0)
    assert producer.flush(60) == 0
    return where


def config(app: str, bootstrap: str, topic: str, dsn: str, tmp: Path) -> dict[str, Any]:
    return {
        "app_id": app,
        "job": "examples.late_clicks:build",
        "batch_interval_ms": 1000,
        "default_partitions": 2,
        "spark": {"master": "local[2,4]"},
        "kafka": {"bootstrap_servers": bootstrap, "require_replication": False},
        "sources": {
            "lines": {
                "topics": [topic],
                "starting_offsets": "earliest",
                "codec": "utf-8",
                "max_rate_per_partition": RATE_PER_PARTITION,
            }
        },
        "sinks": {PAGE_WINDOWS: postgres_sink(dsn, f"{app}_windows")},
        "dead_letter": {"topic": f"{app}.dead-letters"},
        "journal": {"type": "file", "path": str(tmp / "journal")},
        "checkpoint": {"path": str(tmp / "checkpoints"), "interval_batches": 2},
    }


def test_the_event_time_job_writes_the_reference(
    kafka_bootstrap: str, postgres_dsn: str, unique_name: str, tmp_path: Path
) -> None:
    app = re.sub(r"\W", "_", unique_name)[-30:].strip("_").lower()
    topic = f"{app}.clicks"
    create_topic(kafka_bootstrap, topic, partitions=PARTITIONS)
    line_at = produce(kafka_bootstrap, topic, clicks(5))
    driver = ServiceProcess(config(app, kafka_bootstrap, topic, postgres_dsn, tmp_path), tmp_path)
    driver.start()
    try:
        journal = tmp_path / "journal"
        driver.wait_for(lambda _s: drained(journal), 300, "every click to be processed")
        # The metrics take a batch in just after its `completed` record: wait for the last one.
        journaled = len(JournalState.from_records(FileJournal(journal).read()).completed)
        driver.wait_for(
            lambda status: status.get("totals", {}).get("completed", 0) >= journaled,
            60,
            f"the metrics to take in the {journaled} journaled batches",
        )
        late_metric = late_records_metric(driver)
        watermarks = (driver.status() or {}).get("watermarks", {})
        assert driver.terminate() == 0, driver.log_tail()
    finally:
        if driver.running():
            driver.kill()

    model = reference.Model(
        parse_value, constant_one, functions.add, LENGTH_MS, LENGTH_MS, SLACK_MS, LATENESS_MS
    )
    reference.run(model, journaled_batches(journal, line_at))
    expected = {key: (value, model.revisions[key]) for key, value in model.emitted.items()}
    assert table(postgres_dsn, f"{app}_windows") == expected
    assert model.late_total > 0 and any(r > 0 for _v, r in expected.values())
    assert late_letters(kafka_bootstrap, f"{app}.dead-letters") == model.late_total
    assert late_metric == model.late_total
    (figures,) = watermarks.values()
    assert figures["watermark_ms"] is not None


def parse_value(value: int) -> int:
    return value


def drained(journal: Path) -> bool:
    if not (journal).exists():
        return False
    state = JournalState.from_records(FileJournal(journal).read())
    read = sum(r.count for plan in state.planned.values() for r in plan.ranges)
    return read >= CLICKS and not state.pending()


def journaled_batches(journal: Path, line_at: dict[tuple[int, int], str]) -> list[list[Any]]:
    state = JournalState.from_records(FileJournal(journal).read())
    return [
        [
            parse_click(line_at[(r.partition, offset)])
            for r in state.planned[t].ranges
            for offset in range(r.from_offset, r.until_offset)
        ]
        for t in sorted(state.planned)
    ]


def table(dsn: str, name: str) -> dict[tuple[str, int], tuple[int, int]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(f'SELECT page, start_ms, clicks, revision FROM "{name}"').fetchall()  # noqa: S608 - a test's own table name
    return {(str(p), int(s)): (int(c), int(r)) for p, s, c, r in rows}


def late_letters(bootstrap: str, topic: str) -> int:
    """Committed dead letters of type LateRecord (reads until three polls in a row bring none:
    a transactional topic's last offsets are commit markers, never delivered)."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"{topic}-check",
            "isolation.level": "read_committed",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    try:
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
        late, quiet = 0, 0
        while quiet < 3:
            messages = [m for m in consumer.consume(1000, 2.0) if m.error() is None]
            quiet = 0 if messages else quiet + 1
            for message in messages:
                headers = dict(message.headers() or [])
                late += headers.get("dstreams.error.type") == b"LateRecord"
        return late
    finally:
        consumer.close()


def late_records_metric(driver: ServiceProcess) -> int:
    body = (driver.get("/metrics") or b"").decode()
    found = re.findall(r"^dstreams_event_late_records_total\{[^}]*\}\s+(\S+)$", body, re.M)
    return int(sum(float(v) for v in found))
