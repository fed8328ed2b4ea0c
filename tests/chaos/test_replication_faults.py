"""Replicated ingestion and the replicated journal under faults, on three brokers (RF 3, min ISR 2).

1. Ingest under faults: a client sends 50,000 records through `dstreams ingest` in batches with
   idempotency keys, retrying every answer but 200, while one broker is SIGKILLed, the endpoint
   is SIGKILLed and restarted, the driver is SIGKILLed and restarted twice, and a second broker
   is SIGKILLed (two of three down: the endpoint must answer 503 and never 200) before both come
   back. Every record must then be in the PostgreSQL sink exactly once (and in the topic once).
   The faults overlap where they can (a broker restarts while a driver starts), to keep it short.
2. The Kafka journal on RF 3: the leader of the journal's partition is SIGKILLed mid-run; the
   driver carries on through the new leader, is then SIGKILLed itself and restarted while that
   broker restarts, and the new driver must find the whole journal: epoch 2 follows epoch 1, no
   batch is missing, and every sink is exact.
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any

import psycopg
import pytest
from confluent_kafka.admin import AdminClient

from service.dev.ingest_client import IngestClient, IngestReply
from service.dev.kafka_cluster import LocalKafkaCluster
from service.dev.service_process import ServiceProcess
from tests.chaos.conftest import (
    ChaosApp,
    ChaosAppFactory,
    InputProducer,
    make_lines,
    read_topic,
    wait_until,
    word_totals,
)
from tests.soak import soak_only

RECORDS = 50_000
BATCH = 500
# Between requests while the faults happen, so they all land while the client is sending.
PACE_S = 0.4
ACK_TIMEOUT_S = 5.0
# Two brokers stay down longer than a request can wait for its answer: the acknowledgement
# timeout, then an abort bounded by the same timeout. So however a request in flight at the kill
# ends, the client sends again while they are down.
TWO_DOWN_S = 2 * ACK_TIMEOUT_S + 5
SOURCE = "events"
TABLE = "ingested"


# --- ingest ---------------------------------------------------------------------------------


@dataclass
class Sent:
    key: str
    reply: IngestReply | None  # None: no connection (the endpoint was down)


class Client(threading.Thread):
    """Sends every batch until it is answered 200, and keeps every answer."""

    def __init__(self, port: int) -> None:
        super().__init__(name="ingest-client", daemon=True)
        self.port = port
        self.sprint = threading.Event()
        self.answers: list[Sent] = []
        self.error: BaseException | None = None

    def run(self) -> None:
        client = IngestClient("127.0.0.1", self.port, timeout_s=30)
        try:
            for number, first in enumerate(range(0, RECORDS, BATCH)):
                key = f"batch-{number}"
                body = b"".join(
                    json.dumps({"id": i}).encode() + b"\n" for i in range(first, first + BATCH)
                )
                client.send_until_acknowledged(
                    SOURCE,
                    body,
                    key,
                    max_pause_s=0.5,
                    deadline_s=240,
                    on_reply=lambda reply, key=key: self.answers.append(Sent(key, reply)),
                )
                if not self.sprint.is_set():
                    time.sleep(PACE_S)
        except BaseException as exc:  # reported by the test
            self.error = exc
        finally:
            client.close()

    def finish(self, timeout_s: float) -> None:
        self.sprint.set()
        self.join(timeout_s)
        assert not self.is_alive(), "the ingest client did not finish"
        if self.error is not None:
            msg = f"the ingest client failed: {self.error!r}"
            raise AssertionError(msg) from self.error


def ingest_config(app: ChaosApp) -> dict[str, Any]:
    """Overrides of the chaos app's config: the ingest job, its table, replication required."""
    return {
        "job": "examples.ingest_records:build",
        "kafka": {"bootstrap_servers": app.bootstrap, "require_replication": True},
        "sources": {
            SOURCE: {"topics": [app.input_topic], "starting_offsets": "earliest", "codec": "json"}
        },
        "sinks": {
            "records_pg": {
                "type": "postgres",
                "dsn": app.dsn,
                "table": TABLE,
                "columns": ["id"],
                "column_types": {"id": "bigint"},
            }
        },
        # Short, so that requests refused with two brokers down are answered within seconds.
        "ingest": {"ack_timeout_ms": int(ACK_TIMEOUT_S * 1000)},
    }


def wait_ready(endpoint: ServiceProcess) -> None:
    def ready() -> bool:
        assert endpoint.running(), f"the ingest endpoint exited\n{endpoint.log_tail()}"
        return endpoint.get("/readyz") is not None

    wait_until(ready, 90, "the ingest endpoint to be ready")


def kill_and_restart(process: ServiceProcess) -> None:
    code = process.kill()
    assert code == -9, f"expected death by SIGKILL, got {code}\n{process.log_tail()}"
    process.start()


def rows_per_id(dsn: str) -> Counter[int]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(f"SELECT id, count(*) FROM {TABLE} GROUP BY id").fetchall()  # noqa: S608
    return Counter({int(i): int(n) for i, n in rows})


def assert_once(where: str, found: Counter[int]) -> None:
    twice = sorted(i for i, n in found.items() if n > 1)
    missing = sorted(set(range(RECORDS)) - set(found))
    extra = sorted(set(found) - set(range(RECORDS)))
    assert not (twice or missing or extra), (
        f"{where}: {len(twice)} ids more than once {twice[:10]}, {len(missing)} missing "
        f"{missing[:10]}, {len(extra)} unknown {extra[:10]}"
    )


@pytest.mark.timeout(600)
@soak_only("a long fault run whose broker-outage window is timing-sensitive on a loaded machine")
def test_ingested_records_reach_postgres_exactly_once_through_every_fault(
    kafka_cluster3: LocalKafkaCluster, make_chaos_app: ChaosAppFactory
) -> None:
    cluster = kafka_cluster3
    app = make_chaos_app(
        cluster.bootstrap_servers, "ingest", replication=3, rate_per_partition=None
    )
    overrides = ingest_config(app)
    driver = app.service("driver", **overrides)
    endpoint = app.service("ingest", command="ingest", **overrides)
    started = time.monotonic()
    driver.start()
    endpoint.start()
    wait_ready(endpoint)
    client = Client(endpoint.port)
    client.start()
    steps: list[str] = []

    def step(what: str) -> None:
        steps.append(f"{time.monotonic() - started:.0f}s {what}")

    time.sleep(2)
    cluster.kill_broker(0)
    step("broker 0 killed")
    time.sleep(3)
    kill_and_restart(endpoint)
    wait_ready(endpoint)
    step("endpoint killed and restarted")
    app.wait_started(driver)
    kill_and_restart(driver)
    step("driver killed and restarted")
    app.wait_started(driver)  # a driver starting while two brokers are down would be refused
    try:
        cluster.kill_broker(1)
        down_at = time.monotonic()
        step("broker 1 killed: two of three down")
        time.sleep(TWO_DOWN_S)
        up_at = time.monotonic()
    finally:
        cluster.restart_broker(1)
    step("broker 1 restarted")
    try:
        kill_and_restart(driver)
        step("driver killed and restarted")
        client.sprint.set()
    finally:
        cluster.restart_broker(0)  # while the driver starts and the client sends the rest
    step("broker 0 restarted")
    client.finish(timeout_s=300)
    step("client done")
    app.wait_drained(driver)
    app.stop(driver)
    assert endpoint.terminate() == 0, endpoint.log_tail()
    step("drained and stopped")
    print("; ".join(steps))

    # Two of three brokers down: refused, never acknowledged.
    in_window = [
        s.reply
        for s in client.answers
        if s.reply and down_at <= s.reply.sent_at and s.reply.answered_at <= up_at
    ]
    written = [r for r in in_window if r.status == 200 and not r.body.get("duplicate")]
    assert written == [], f"acknowledged with two of three brokers down: {written}"
    # A request sent while two brokers were down is refused once its acknowledgement times out,
    # which on a loaded machine may come after the window closed: count it by when it was sent.
    sent_in_window = [
        s.reply for s in client.answers if s.reply and down_at <= s.reply.sent_at <= up_at
    ]
    assert any(r.status == 503 for r in sent_in_window), (
        f"no 503 for a request sent while two brokers were down: {sent_in_window}"
    )
    statuses = Counter(s.reply.status if s.reply else "no connection" for s in client.answers)
    print(f"answers: {dict(statuses)}")
    assert statuses[200] == RECORDS // BATCH  # one 200 per batch: the client stops at the first

    topic_ids = Counter(
        int(json.loads(m.value())["id"]) for m in read_topic(app.bootstrap, app.input_topic)
    )
    assert_once("input topic (read_committed)", topic_ids)
    assert_once("PostgreSQL sink", rows_per_id(app.dsn))


# --- the Kafka journal ------------------------------------------------------------------------

LINES = 12_000


def journal_leader(bootstrap: str, topic: str) -> int:
    """The broker index (0-based) leading the journal's only partition."""
    metadata = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=30)
    leader = metadata.topics[topic].partitions[0].leader
    assert leader > 0, f"journal topic {topic} has no leader"
    return int(leader) - 1  # LocalKafkaCluster numbers nodes from 1


@pytest.mark.timeout(600)
@soak_only("three brokers, a leader killed and a driver killed: about two minutes")
def test_kafka_journal_survives_its_leader_being_killed(
    kafka_cluster3: LocalKafkaCluster, make_chaos_app: ChaosAppFactory
) -> None:
    cluster = kafka_cluster3
    app = make_chaos_app(
        cluster.bootstrap_servers, "journal", replication=3, rate_per_partition=500
    )
    app.journal_topic = f"{app.app_id}.journal"
    lines = make_lines(61, LINES)
    InputProducer(app.bootstrap, app.input_topic).send([line.encode() for line in lines])
    driver = app.service(kafka={"bootstrap_servers": app.bootstrap, "require_replication": True})
    started = time.monotonic()
    steps: list[str] = []

    def step(what: str) -> None:
        steps.append(f"{time.monotonic() - started:.0f}s {what}")

    driver.start()
    app.wait_completed(driver)
    step("first batch completed")
    leader = journal_leader(app.bootstrap, app.journal_topic)
    cluster.kill_broker(leader)
    step(f"journal leader (broker {leader}) killed")
    try:
        # Appends go on through the new leader...
        app.wait_completed(driver, driver.completed_batches() + 1, timeout_s=120)
        step("another batch completed")
        # ...and a new driver, started while the old leader is still down, reads the journal.
        assert driver.kill() == -9
        driver.start()
    finally:
        cluster.restart_broker(leader)  # meanwhile the new driver starts
    step("driver killed and restarted; broker restarted")
    driver.wait_for(lambda s: s.get("epoch") == 2, 120, "epoch 2 on the restarted driver")
    step("the new driver holds epoch 2")
    app.wait_drained(driver)
    app.stop(driver)
    step("drained and stopped")
    print("; ".join(steps))

    # Every append of both drivers is there: epoch 1, then 2, and (in verify) every batch, each
    # planned range following the last, nothing pending, and exactly the batches the sinks hold.
    assert [r.epoch for r in app.journal_state().epochs] == [1, 2]
    app.verify(word_totals(lines))
