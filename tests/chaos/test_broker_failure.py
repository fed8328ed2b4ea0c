"""Broker failure on a 3-broker cluster (every topic replication 3, min.insync.replicas 2).

1. One broker SIGKILLed: the service keeps completing batches (leaders move, transactions go on);
   the broker is restarted.
2. Two of three SIGKILLed: no write can be acknowledged and the controller quorum is gone. The
   driver must stay up and stall rather than lose or duplicate anything, and say so: `/status`
   turns `healthy: false` (the running batch is stuck) and `/healthz` stops answering 200. Once
   the brokers are back it resumes and turns healthy again.
At the end every sink is exact.
"""

from __future__ import annotations

from typing import Any

import pytest

from service.dev.service_process import ServiceProcess
from tests.chaos.conftest import (
    ChaosAppFactory,
    InputProducer,
    make_lines,
    wait_until,
    word_totals,
)

LINES = 12_000


def completed(driver: ServiceProcess) -> int:
    return int(((driver.status() or {}).get("totals") or {}).get("completed", 0))


def healthy(driver: ServiceProcess) -> bool:
    assert driver.running(), f"the driver exited instead of stalling\n{driver.log_tail()}"
    return bool((driver.status() or {}).get("healthy"))


@pytest.mark.timeout(600)
def test_broker_failures_stall_then_resume_exactly(
    kafka_cluster3: Any, make_chaos_app: ChaosAppFactory
) -> None:
    cluster = kafka_cluster3
    app = make_chaos_app(
        cluster.bootstrap_servers, "brokers", replication=3, rate_per_partition=500
    )
    lines = make_lines(51, LINES)
    producer = InputProducer(app.bootstrap, app.input_topic)
    producer.send([line.encode() for line in lines[: LINES // 2]])
    # Stalled for 10 s is unhealthy here (30 s by default), so the test need not wait longer.
    driver = app.service(http={"unhealthy_after_s": 10})
    driver.start()
    app.wait_completed(driver)

    try:
        cluster.kill_broker(0)
        app.wait_completed(driver, completed(driver) + 1, timeout_s=240)
    finally:
        cluster.restart_broker(0)

    # Fresh input, so the stall happens with work in hand (not between empty batches).
    producer.send([line.encode() for line in lines[LINES // 2 :]])
    try:
        cluster.kill_broker(1)
        cluster.kill_broker(2)
        wait_until(lambda: not healthy(driver), 180, "/status to report the stall")
        stalled_at = completed(driver)
        assert driver.get("/healthz") is None, "/healthz must not answer 200 while stalled"
        print(f"2 of 3 brokers down: stalled after {stalled_at} batches, reported unhealthy")
    finally:
        cluster.restart_brokers(1, 2)
    wait_until(lambda: healthy(driver) and completed(driver) > stalled_at, 240, "the resumption")

    app.wait_drained(driver, timeout_s=240)
    app.stop(driver)
    assert driver.starts == 1
    app.verify(word_totals(lines))
