"""Fixtures shared by every tier. Each real component is started once per session and stopped
by PID; tests get unique topic, group and table names."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

# Pinned before any SparkContext exists so that hash partitioning is identical on every run.
os.environ.setdefault("PYTHONHASHSEED", "0")


@pytest.fixture
def unique_name(request: pytest.FixtureRequest) -> str:
    """A short name unique to this test, usable as a topic, group or table name."""
    base = "".join(ch if ch.isalnum() else "_" for ch in request.node.name)[:40]
    return f"{base}_{uuid.uuid4().hex[:8]}".lower()


# --- Spark -----------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def spark_context() -> Iterator[Any]:
    """One local SparkContext for the whole session (local[2], UI off, fixed hash seed)."""
    from service.driver.spark import create_spark_context

    sc = create_spark_context(app_name="dstreams-tests", master="local[2]")
    yield sc
    sc.stop()


@pytest.fixture
def sc(spark_context: Any) -> Iterator[Any]:
    """The session SparkContext with fresh state: cached RDDs are unpersisted after the test."""
    yield spark_context
    for rdd in list(spark_context._jsc.getPersistentRDDs().values()):
        rdd.unpersist()


# --- Tiers -----------------------------------------------------------------------------------

TIERS = ("unit", "spark", "kafka", "postgres", "cluster", "chaos", "containers")
_TESTS_DIR = Path(__file__).resolve().parent
_TIER_OF_FOLDER = {tier: tier for tier in TIERS}
# Contract suites run every backend through the same tests, so each case carries its own tier
# mark (`pytest.param(..., marks=pytest.mark.kafka)`) instead of taking its folder's.
_CASE_MARKED_FOLDERS = frozenset({"contracts"})


def _tier_of(item: pytest.Item) -> str | None:
    """The tier an item runs in: its folder's, `unit` for the packages' doctests, or (in a
    contract suite) the one tier its case is marked with."""
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
            backend = f" (Kafka backend: {_KAFKA_BACKEND[0]})" if _KAFKA_BACKEND else ""
            terminalreporter.write_line(f"time per tier: {spent}{backend}")


# The Kafka backend the session's `kafka_bootstrap` ran on, for the summary line.
_KAFKA_BACKEND: list[str] = []
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
def kafka_bootstrap(request: pytest.FixtureRequest) -> Iterator[str]:
    """Bootstrap servers of a 1-broker Kafka for the session: external, Testcontainers or local.

    On Testcontainers it is the session's one broker container (`kafka_on_docker`), which the
    container tier's tests also reach from their own containers.
    """
    from service.dev.brokers import announce, kafka_backend, kafka_endpoint

    backend = kafka_backend(brokers=1)
    _KAFKA_BACKEND[:] = [backend]
    if backend == "testcontainers":
        kafka = request.getfixturevalue("kafka_on_docker")
        announce(f"Testcontainers {kafka.image} (KRaft) at {kafka.bootstrap}")
        yield kafka.bootstrap
        return
    with kafka_endpoint(brokers=1) as bootstrap:
        yield bootstrap


@pytest.fixture(scope="module")
def kafka_cluster3() -> Iterator[Any]:
    """A started local 3-broker `LocalKafkaCluster` (RF=3, min ISR 2). Always local: tests kill
    its brokers. Tests that kill one must restart it before they end."""
    from service.dev.kafka_cluster import LocalKafkaCluster

    with LocalKafkaCluster(brokers=3) as cluster:
        yield cluster


@pytest.fixture
def make_topic() -> Any:
    """`make_topic(bootstrap, name, partitions=1, replication=1, config=None) -> name`: create a
    topic and wait until every partition has a leader and a full ISR."""
    from service.dev.brokers import create_topic

    return create_topic


# --- Docker (see service/dev/docker_engine.py and service/dev/images.py) ----------------------


@pytest.fixture(scope="session")
def docker_engine() -> Iterator[Any]:
    """A Docker engine for the session (`DockerEngine`): the one that answers, else a private one
    started here and stopped at the end. DOCKER_HOST names it while the session runs."""
    from service.dev.docker_engine import docker_engine as engine_for_session
    from service.dev.docker_engine import engine_environment

    with engine_for_session() as engine, engine_environment(engine):
        yield engine


@pytest.fixture(scope="session")
def kafka_on_docker(docker_engine: Any) -> Iterator[Any]:
    """The session's one Testcontainers broker on the local Kafka image (`KafkaOnDocker`)."""
    from service.dev.kafka_container import kafka_on_docker as start_kafka

    with start_kafka(docker_engine) as kafka:
        yield kafka


# --- PostgreSQL (see service/dev/postgres_server.py) ------------------------------------------


@pytest.fixture(scope="session")
def postgres_dsn() -> Iterator[str]:
    """A PostgreSQL server for the session: `POSTGRES_DSN` if set, else a throwaway local one."""
    from service.dev.postgres_server import postgres_endpoint

    with postgres_endpoint() as dsn:
        yield dsn


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
