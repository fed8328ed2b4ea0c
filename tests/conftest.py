"""Fixtures shared by every tier. Each real component is started once per session and stopped
by PID; tests get unique topic, group and table names.

Spark, the session's Kafka, PostgreSQL, Docker, `unique_name` and the job fixtures come from the
package's pytest plugin (service/testing/pytest_plugin.py, loaded by `-p` in pyproject's
addopts); what is here is this repository's own: tiers, brokers tests kill, a secured broker."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from service.dev.kafka_cluster import BROKER_JAVA_OPTIONS_ENV
from service.testing import unpersist_all
from service.testing.pytest_plugin import KAFKA_BACKEND
from tests.jvm import TEST_JVM_OPTIONS

# Pinned before any SparkContext exists so that hash partitioning is identical on every run.
os.environ.setdefault("PYTHONHASHSEED", "0")
# The driver JVMs of the tests (the session's Spark and every `dstreams run` they start) compile
# with C1 only. A test's driver lives seconds to minutes, and C2 compiling Spark's start-up path
# cost about twice the JVM's CPU time (15 s against 7 s for a short job, measured here); on two
# cores that is the suite's time. spark-submit adds SPARK_SUBMIT_OPTS to the driver's JVM.
os.environ.setdefault("SPARK_SUBMIT_OPTS", TEST_JVM_OPTIONS)
# The same for the brokers the tests start: a 3-broker cluster was up in 9-12 s on 12-17 s of CPU
# with C1 alone, against 17 s on 26 s.
os.environ.setdefault(BROKER_JAVA_OPTIONS_ENV, TEST_JVM_OPTIONS)


# --- Spark -----------------------------------------------------------------------------------


@pytest.fixture
def sc(spark_context: Any) -> Iterator[Any]:
    """The session SparkContext with fresh state: cached RDDs are unpersisted after the test."""
    yield spark_context
    unpersist_all(spark_context)


# --- Tiers -----------------------------------------------------------------------------------

TIERS = ("unit", "spark", "kafka", "postgres", "cluster", "chaos", "containers")
_TESTS_DIR = Path(__file__).resolve().parent
# The examples' tests show users the plugin's fast path: each runs a job on the session's Spark.
_EXAMPLES_DIR = _TESTS_DIR.parent / "examples"
_TIER_OF_FOLDER = {tier: tier for tier in TIERS}
# Contract suites run every backend through the same tests, so each case carries its own tier
# mark (`pytest.param(..., marks=pytest.mark.kafka)`) instead of taking its folder's.
_CASE_MARKED_FOLDERS = frozenset({"contracts"})


def _tier_of(item: pytest.Item) -> str | None:
    """The tier an item runs in: its folder's, `unit` for the packages' doctests, `spark` for
    the examples' tests, or (in a contract suite) the one tier its case is marked with."""
    if _EXAMPLES_DIR in item.path.parents:
        return "spark"
    if _TESTS_DIR not in item.path.parents:
        return "unit"  # a docstring example of the packages (--doctest-modules): pure by rule
    folder = item.path.parent.name
    if folder not in _CASE_MARKED_FOLDERS:
        return _TIER_OF_FOLDER.get(folder)
    marked = sorted({mark.name for mark in item.iter_markers() if mark.name in TIERS})
    if len(marked) != 1:
        msg = (
            f"{item.nodeid}: expected each contract case to carry exactly one tier mark of "
            f"{TIERS}, found {marked}; give its backend's pytest.param a `marks=` tier"
        )
        raise pytest.UsageError(msg)
    return marked[0]


class _TierClock:
    """Adds up setup, call and teardown time per tier, for one summary line. A plugin rather than
    conftest hooks: conftest hooks see only tests under tests/, not the packages' doctests."""

    def __init__(self) -> None:
        self.tier_of_node: dict[str, str] = {}
        self.seconds: dict[str, float] = {}

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        tier = self.tier_of_node.get(report.nodeid, "other")
        self.seconds[tier] = self.seconds.get(tier, 0.0) + report.duration

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        """One line of time per tier: the chaos tier's budget is watched from CI's output."""
        if self.seconds:
            spent = ", ".join(f"{tier} {seconds:.0f}s" for tier, seconds in self.seconds.items())
            used = terminalreporter.config.stash.get(KAFKA_BACKEND, None)
            backend = f" (Kafka backend: {used})" if used else ""
            terminalreporter.write_line(f"time per tier: {spent}{backend}")


_CLOCK = _TierClock()


def pytest_configure(config: pytest.Config) -> None:
    if not config.pluginmanager.is_registered(_CLOCK):
        config.pluginmanager.register(_CLOCK, "dstreams-tier-clock")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark each test with its tier, so `-m unit` needs no per-file marks."""
    for item in items:
        tier = _tier_of(item)
        if tier is not None:
            item.add_marker(getattr(pytest.mark, tier))
            _CLOCK.tier_of_node[item.nodeid] = tier


# --- Kafka (see service/dev/kafka_cluster.py) -------------------------------------------------


@pytest.fixture(scope="session")
def three_broker_cluster() -> Iterator[Any]:
    """The session's local 3-broker `LocalKafkaCluster`; tests ask for `kafka_cluster3`."""
    from service.dev.kafka_cluster import LocalKafkaCluster

    with LocalKafkaCluster(brokers=3) as cluster:
        yield cluster


@pytest.fixture
def kafka_cluster3(three_broker_cluster: Any) -> Any:
    """A started local 3-broker `LocalKafkaCluster` (RF=3, min ISR 2), shared by the session's
    tests (each starts in ~20 s). Always local: tests kill its brokers. Tests that kill one
    restart it before they end; a broker a failed test left down is started again here, so
    every test finds three."""
    three_broker_cluster.revive()
    return three_broker_cluster


@pytest.fixture
def make_topic() -> Any:
    """`make_topic(bootstrap, name, partitions=1, replication=1, config=None) -> name`: create a
    topic and wait until every partition has a leader and a full ISR."""
    from service.dev.brokers import create_topic

    return create_topic


# --- A secured Kafka (see service/dev/kafka_security.py) ---------------------------------------


@pytest.fixture(scope="session")
def secured_kafka() -> Iterator[Any]:
    """A started local 1-broker `LocalKafkaCluster(secure=True)` for the session: mutual TLS,
    SASL_SSL with SCRAM-SHA-512, the StandardAuthorizer. Its PLAINTEXT `bootstrap_servers` is a
    super-user port for test setup and verification; services use the secured listeners."""
    from service.dev.kafka_cluster import LocalKafkaCluster

    with LocalKafkaCluster(brokers=1, secure=True) as cluster:
        yield cluster


# --- S3-compatible object storage (see service/dev/s3_server.py) -------------------------------


@pytest.fixture(scope="session")
def s3_server() -> Iterator[Any]:
    """A throwaway SeaweedFS S3 server for the session, with one bucket (`LocalS3`); tests keep
    apart under prefixes of their own."""
    from service.dev.s3_server import LocalS3

    with LocalS3() as server:
        yield server
