"""The cluster tier: the word-count app of the chaos tier, run on a real Spark standalone cluster.

Each test module shares one `LocalSparkCluster` (a master and two workers of one core each, from
pyspark's own jars, see `service.dev.spark_cluster`), started once and stopped by PID. The app,
its topics, database and verifier are the chaos tier's (`tests/chaos/conftest.py`); only the
driver's Spark settings differ: the cluster's master, small executors, and checkpoints on an
absolute path (every executor of a cluster must see it).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest

from service.dev.service_process import ServiceProcess
from service.dev.spark_cluster import LocalSparkCluster
from service.driver.spark import LOG4J2_FILE
from tests.chaos.conftest import (  # noqa: F401 - fixtures shared with the chaos tier
    ChaosApp,
    chaos_app,
    pg_database,
)
from tests.jvm import TEST_JVM_OPTIONS

# Executors of 512 MB leave room for a second application on a 1 GB worker: a restarted driver's
# executors can start while the killed driver's are still being torn down.
EXECUTOR_MEMORY = "512m"
# Executors start in 5-20 s on a busy 2-core machine, Spark's own start in 5-20 s more.
CLUSTER_START_TIMEOUT_S = 180.0
# A first batch completes once Spark is up and has executors, then a batch's work more.
FIRST_BATCH_TIMEOUT_S = CLUSTER_START_TIMEOUT_S + 60.0
EXECUTOR_LOG4J = f"-Dlog4j.configurationFile=file:{LOG4J2_FILE}"


@pytest.fixture(scope="module")
def spark_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalSparkCluster]:
    """A master and two 1-core workers for the module; stopped (by PID) after its last test."""
    workdir = tmp_path_factory.mktemp("spark-cluster")
    with LocalSparkCluster(workers=2, cores=1, memory="1g", workdir=workdir) as cluster:
        yield cluster


@pytest.fixture(autouse=True)
def idle_cluster(request: pytest.FixtureRequest) -> None:
    """Every cluster test starts on idle workers: the last test's executors are gone, so a new
    driver's executors start at once instead of waiting for cores."""
    if "spark_cluster" in request.fixturenames:
        request.getfixturevalue("spark_cluster").wait_idle()


def cluster_settings(cluster: LocalSparkCluster, **conf: str) -> dict[str, Any]:
    """The `spark` section of a job's config that runs it on `cluster`."""
    return {
        "master": cluster.master_url,
        "start_timeout_s": CLUSTER_START_TIMEOUT_S,
        "conf": {
            "spark.executor.memory": EXECUTOR_MEMORY,
            # Replaces the log4j option dstreams gives executors on this host, so it is repeated.
            "spark.executor.extraJavaOptions": f"{EXECUTOR_LOG4J} {TEST_JVM_OPTIONS}",
            **conf,
        },
    }


def cluster_driver(
    app: ChaosApp, cluster: LocalSparkCluster, name: str = "driver", **conf: str
) -> ServiceProcess:
    """A driver process of `app` on `cluster` (not started)."""
    return app.service(
        name,
        spark=cluster_settings(cluster, **conf),
        checkpoint={"path": str(app.workdir / "checkpoints")},
    )


def spark_log_lines(driver: ServiceProcess, pattern: str) -> list[str]:
    """Lines of Spark's own (log4j) log in the driver's output that match `pattern`."""
    found = re.compile(pattern)
    text = driver.log_path.read_text(errors="replace") if driver.log_path.exists() else ""
    return [line for line in text.splitlines() if found.search(line)]
