"""The dstreams pytest plugin: fixtures to test a job fast on lists, and for real as the service.

Installed with the package (the `pytest11` entry point of the same name as this module, so that
`-p service.testing.pytest_plugin` and the entry point never register it twice). Fixtures:

- `job_runner(job, inputs, ...)`: the fast path. Runs a job's `build(ctx)` on per-batch lists
  for each source and returns each output's rows per batch (`service.testing.jobs.run_job`),
  on `spark_context`, one local Spark for the whole session.
- `kafka_bootstrap`: a 1-broker Kafka for the session: `KAFKA_BOOTSTRAP_SERVERS` if set, else
  Testcontainers' `KafkaContainer` when a Docker engine answers, else a local KRaft broker
  (`service.dev.brokers`); `postgres_dsn`: `POSTGRES_DSN` if set, else a throwaway local server.
- `job_service(config)`: runs the job as the service (`python -m service run`) in a subprocess
  with that config, and stops it by PID after the test.
- `unique_name`: a name unique to the test, for topics, groups and tables.

Helpers to produce input and read outputs as the sinks committed them are in
`service.testing.outputs`. Every process a fixture starts, it stops.
"""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from service.dev.docker_engine import DockerEngine
    from service.dev.kafka_container import KafkaOnDocker
    from service.dev.service_process import ServiceProcess
    from service.testing.jobs import JobRun

KAFKA_BACKEND = pytest.StashKey[str]()
"""The Kafka backend the session's `kafka_bootstrap` runs on (external, testcontainers, local)."""

# A graceful stop lets the running batch commit; a job under test stops well within this.
SERVICE_STOP_TIMEOUT_S = 60


@pytest.fixture
def unique_name(request: pytest.FixtureRequest) -> str:
    """A short name unique to this test, usable as a topic, group or table name."""
    base = "".join(ch if ch.isalnum() else "_" for ch in request.node.name)[:40]
    return f"{base}_{uuid.uuid4().hex[:8]}".lower()


# --- the fast path ----------------------------------------------------------------------------


@pytest.fixture(scope="session")
def spark_context(pytestconfig: pytest.Config) -> Iterator[Any]:
    """One local SparkContext for the session (local[2], UI off, fixed hash seed). The test
    session's root directory is put on the workers' path, so a job module there imports."""
    from service.driver.job_code import use_app_dir
    from service.driver.spark import create_spark_context

    use_app_dir(pytestconfig.rootpath)
    sc = create_spark_context(app_name="dstreams-tests", master="local[2]")
    yield sc
    sc.stop()


@pytest.fixture
def job_runner(spark_context: Any) -> Iterator[Callable[..., JobRun]]:
    """`job_runner(job, {source: [[batch 1 values], [batch 2 values], ...]}, **options)`:
    `service.testing.jobs.run_job` on the session's Spark; `job` is a `build(ctx)` function or
    `"module:function"`. Options: batches, batch_interval_ms, first_batch_ms,
    default_partitions, sort. The RDDs the runs cached are released after the test."""
    from service.testing import unpersist_all
    from service.testing.jobs import run_job

    def run(job: Any, inputs: Mapping[str, Any], **options: Any) -> JobRun:
        return run_job(spark_context, job, inputs, **options)

    yield run
    unpersist_all(spark_context)


# --- Kafka (service/dev/brokers.py) -----------------------------------------------------------


@pytest.fixture(scope="session")
def kafka_bootstrap(request: pytest.FixtureRequest) -> Iterator[str]:
    """Bootstrap servers of a 1-broker Kafka for the session: external, Testcontainers or local.

    On Testcontainers it is the session's one broker container (`kafka_on_docker`), which
    tests can also reach from their own containers.
    """
    from service.dev.brokers import announce, kafka_backend, kafka_endpoint

    backend = kafka_backend(brokers=1)
    request.config.stash[KAFKA_BACKEND] = backend
    if backend == "testcontainers":
        kafka = request.getfixturevalue("kafka_on_docker")
        announce(f"Testcontainers {kafka.image} (KRaft) at {kafka.bootstrap}")
        yield kafka.bootstrap
        return
    with kafka_endpoint(brokers=1) as bootstrap:
        yield bootstrap


@pytest.fixture(scope="session")
def docker_engine() -> Iterator[DockerEngine]:
    """A Docker engine for the session: the one that answers, else a private one started here
    and stopped at the end (service/dev/docker_engine.py). DOCKER_HOST names it meanwhile."""
    from service.dev.docker_engine import docker_engine as engine_for_session
    from service.dev.docker_engine import engine_environment

    with engine_for_session() as engine, engine_environment(engine):
        yield engine


@pytest.fixture(scope="session")
def kafka_on_docker(docker_engine: DockerEngine) -> Iterator[KafkaOnDocker]:
    """The session's one Testcontainers broker on the local Kafka image."""
    from service.dev.kafka_container import kafka_on_docker as start_kafka

    with start_kafka(docker_engine) as kafka:
        yield kafka


# --- PostgreSQL (service/dev/postgres_server.py) ----------------------------------------------


@pytest.fixture(scope="session")
def postgres_dsn() -> Iterator[str]:
    """A PostgreSQL server for the session: `POSTGRES_DSN` if set, else a throwaway local one."""
    from service.dev.postgres_server import postgres_endpoint

    with postgres_endpoint() as dsn:
        yield dsn


# --- the job as the service -------------------------------------------------------------------


@pytest.fixture
def job_service(
    pytestconfig: pytest.Config, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Callable[..., ServiceProcess]]:
    """`job_service(config, name="service", env=None) -> ServiceProcess`: starts
    `dstreams run` with `config` (the job's YAML as a dict; its HTTP port is chosen here) in the
    session's root directory, where the job's module imports from. The test waits on it with
    `wait_for(predicate, timeout_s, what)` over `/status`; it is stopped (SIGTERM, then SIGKILL)
    by its PID after the test."""
    from service.dev.service_process import ServiceProcess

    started: list[ServiceProcess] = []

    def start(
        config: Mapping[str, Any], name: str = "service", env: Mapping[str, str] | None = None
    ) -> ServiceProcess:
        workdir = tmp_path_factory.mktemp(f"job-service-{name}")
        process = ServiceProcess(dict(config), workdir, env, name, cwd=Path(pytestconfig.rootpath))
        started.append(process)
        process.start()
        return process

    yield start
    for process in started:
        _stop(process)


def _stop(process: ServiceProcess) -> None:
    try:
        process.terminate(SERVICE_STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        process.kill()
