"""Every broker of a 3-broker cluster down for longer than the Kafka sink's transaction timeout
(10 s here, 60 s by default), while batches with input are running.

The transactions open when the brokers went away cannot commit: when the brokers return, their
coordinator aborts each one that outlived its timeout. Nothing of an aborted transaction is
visible to `read_committed` readers, and its batch, still planned but not completed in the
journal, is written again, so no record is lost or duplicated. The driver stays up through the
outage (nothing to plan or commit, so nothing it can do) and resumes by itself when the brokers
are back; a run that needed a restart would show in `driver.starts`.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from service.dev.service_process import ServiceProcess
from tests.chaos.conftest import (
    KAFKA_OUT,
    ChaosAppFactory,
    InputProducer,
    make_lines,
    word_totals,
)
from tests.soak import soak_only

LINES = 8_000
TRANSACTION_TIMEOUT_MS = 10_000
OUTAGE_S = 25  # past the timeout, and past the coordinators' abort sweep (every 10 s)


def completed(driver: ServiceProcess) -> int:
    return int(((driver.status() or {}).get("totals") or {}).get("completed", 0))


@pytest.mark.timeout(600)
@soak_only(
    "about 3-5 minutes on this machine (a 3-broker cluster down for 25 s, then the catch-up)"
)
def test_all_brokers_down_past_the_transaction_timeout_loses_and_duplicates_nothing(
    kafka_cluster3: Any, make_chaos_app: ChaosAppFactory
) -> None:
    cluster = kafka_cluster3
    app = make_chaos_app(
        cluster.bootstrap_servers, "txn_timeout", replication=3, rate_per_partition=40
    )
    sinks = app.config()["sinks"]
    sinks[KAFKA_OUT]["transaction_timeout_ms"] = TRANSACTION_TIMEOUT_MS
    lines = make_lines(53, LINES)
    producer = InputProducer(app.bootstrap, app.input_topic)
    producer.send([line.encode() for line in lines[: LINES // 2]])
    driver = app.service(sinks=sinks)
    driver.start()
    app.wait_completed(driver)
    # More input, read at 160 lines/s for about 25 s, so that batches with records are in flight
    # when the brokers go.
    producer.send([line.encode() for line in lines[LINES // 2 :]])
    app.wait_completed(driver, completed(driver) + 2)
    ends = app.input_ends()
    planned = app.journal_state().last_positions()
    assert any(planned.get(tp, 0) < end for tp, end in ends.items()), "input left to read"
    try:
        for index in range(3):
            cluster.kill_broker(index)
        time.sleep(OUTAGE_S)
        assert driver.running(), f"the driver exited during the outage\n{driver.log_tail()}"
    finally:
        cluster.restart_brokers(0, 1, 2)
    app.wait_drained(driver, timeout_s=300)
    app.stop(driver)
    assert driver.starts == 1
    app.verify(word_totals(lines))
