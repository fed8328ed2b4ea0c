"""The word count on a real standalone cluster (a master, two 1-core workers): exact in all sinks.

The driver runs `examples.wordcount_all_sinks` (Kafka, PostgreSQL and files outputs) with
`spark.master` set to the cluster; the job's package is shipped to the executors as a zip,
since their working directories hold no copy of it. One shared cluster serves the module.
"""

from __future__ import annotations

import pytest

from service.dev.spark_cluster import LocalSparkCluster
from tests.chaos.conftest import ChaosApp, make_lines, produce, word_totals
from tests.cluster.conftest import cluster_driver

LINES = 8_000


def test_the_cluster_has_two_workers_on_their_own_loopback_addresses(
    spark_cluster: LocalSparkCluster,
) -> None:
    state = spark_cluster.master_state()
    hosts = sorted(worker["host"] for worker in state["workers"] if worker["state"] == "ALIVE")
    assert hosts == ["127.0.0.2", "127.0.0.3"]
    assert all(worker["cores"] == 1 for worker in state["workers"])


@pytest.mark.timeout(400)
def test_word_count_on_the_cluster_is_exact_in_every_sink(
    spark_cluster: LocalSparkCluster, chaos_app: ChaosApp
) -> None:
    app = chaos_app
    app.rate_per_partition = 500  # 2,000 lines a batch: four batches or so
    lines = make_lines(21, LINES)
    produce(app.bootstrap, app.input_topic, [line.encode() for line in lines])
    driver = cluster_driver(app, spark_cluster)

    driver.start()
    app.wait_drained(driver)
    # Both workers ran executors for this driver, one each.
    assert all(spark_cluster.executor_pids(i) for i in range(2)), driver.log_tail()
    app.stop(driver)

    app.verify(word_totals(lines))
