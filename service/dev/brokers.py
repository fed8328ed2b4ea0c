"""Which Apache Kafka the tests and the demo talk to, and how they create topics on it.

Order of choice (docs/architecture.md, Tests): `KAFKA_BOOTSTRAP_SERVERS` names an external
cluster; else, when a Docker engine answers, a Testcontainers Kafka (`service.dev.kafka_container`,
on the image the project builds locally); else a local KRaft cluster started from the pinned Apache
Kafka jars (`service.dev.kafka_cluster`). `DSTREAMS_KAFKA_BACKEND` names one of the three and makes
it required: `make test-containers` sets it to `testcontainers`, so that path cannot quietly fall
back to the local cluster. Required, Testcontainers may start a private Docker engine
(`service.dev.docker_engine`) when none answers; chosen by the order above, it only uses one that
answers.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Literal

from service.dev.docker_engine import start_refusal
from service.dev.kafka_cluster import KafkaClusterError, LocalKafkaCluster

KafkaBackend = Literal["external", "testcontainers", "local"]
BACKENDS: tuple[KafkaBackend, ...] = ("external", "testcontainers", "local")

BOOTSTRAP_ENV = "KAFKA_BOOTSTRAP_SERVERS"
BACKEND_ENV = "DSTREAMS_KAFKA_BACKEND"


def choose_kafka_backend(environ: Mapping[str, str], docker_available: bool) -> KafkaBackend:
    """The backend to use: the one `DSTREAMS_KAFKA_BACKEND` requires, else an external cluster
    if named, else Testcontainers, else local. `docker_available`: an engine answers or, when
    Testcontainers is required, can be started."""
    required = environ.get(BACKEND_ENV, "").strip().lower()
    if required:
        return _required_backend(required, environ, docker_available)
    if environ.get(BOOTSTRAP_ENV, "").strip():
        return "external"
    if docker_available:
        return "testcontainers"
    return "local"


def _required_backend(
    required: str, environ: Mapping[str, str], docker_available: bool
) -> KafkaBackend:
    for backend in BACKENDS:
        if required == backend:
            break
    else:
        msg = f"{BACKEND_ENV}={required!r} is not a Kafka backend: use one of {', '.join(BACKENDS)}"
        raise KafkaClusterError(msg)
    if backend == "external" and not environ.get(BOOTSTRAP_ENV, "").strip():
        msg = f"{BACKEND_ENV}=external needs {BOOTSTRAP_ENV} to name the cluster's brokers"
        raise KafkaClusterError(msg)
    if backend == "testcontainers" and not docker_available:
        msg = (
            f"{BACKEND_ENV}=testcontainers, but no Docker engine answered (DOCKER_HOST or "
            "/var/run/docker.sock) and none can be started here: start Docker, run as root with "
            "Debian's docker.io installed, or unset the variable to use the local cluster"
        )
        raise KafkaClusterError(msg)
    return backend


def docker_engine_answers(timeout_s: float = 2.0) -> bool:
    """True when a Docker engine (DOCKER_HOST or the default socket) answers a ping."""
    try:
        import docker  # type: ignore[import-untyped]  # docker-py ships no type information

        client = docker.from_env(timeout=timeout_s)
        try:
            return bool(client.ping())
        finally:
            client.close()
    except Exception:  # any failure means "no usable engine": fall back to the local cluster
        return False


def kafka_backend(brokers: int = 1) -> KafkaBackend:
    """The backend `kafka_endpoint(brokers)` uses in this environment."""
    # Docker is only asked when it matters: the ping can take its whole timeout.
    required = os.environ.get(BACKEND_ENV, "").strip().lower()
    named = bool(os.environ.get(BOOTSTRAP_ENV, "").strip())
    ask_docker = required == "testcontainers" or (not required and not named)
    docker_available = ask_docker and docker_engine_answers()
    if required == "testcontainers" and not docker_available:
        dockerd = shutil.which("dockerd")
        docker_available = start_refusal(os.environ, os.geteuid(), dockerd) is None
    backend = choose_kafka_backend(os.environ, docker_available=docker_available)
    # Testcontainers gives one broker only: more are served by the local cluster.
    return "local" if backend == "testcontainers" and brokers > 1 else backend


@contextmanager
def kafka_endpoint(brokers: int = 1) -> Iterator[str]:
    """Yield the bootstrap servers of a Kafka with `brokers` brokers, stopping it afterwards.

    An external cluster is used as it is. Testcontainers gives one broker only, so a request for
    more brokers is served by the local cluster.
    """
    backend = kafka_backend(brokers)
    if backend == "external":
        bootstrap = os.environ[BOOTSTRAP_ENV].strip()
        announce(f"external cluster from ${BOOTSTRAP_ENV} at {bootstrap}")
        yield bootstrap
    elif backend == "testcontainers":
        from service.dev.docker_engine import docker_engine
        from service.dev.kafka_container import kafka_on_docker

        with docker_engine() as engine, kafka_on_docker(engine) as kafka:
            announce(f"Testcontainers {kafka.image} (KRaft) at {kafka.bootstrap}")
            yield kafka.bootstrap
    else:
        with LocalKafkaCluster(brokers=brokers) as cluster:
            announce(
                f"local KRaft cluster of {brokers} broker(s) at {cluster.bootstrap_servers} "
                f"(files in {cluster.workdir})"
            )
            yield cluster.bootstrap_servers


def announce(what: str) -> None:
    """One line on stderr naming the Kafka in use (pytest shows it with the session's output)."""
    print(f"dstreams: Kafka backend: {what}", file=sys.stderr, flush=True)


# --- Topics -----------------------------------------------------------------------------------

# Creating a topic is a metadata write; on a loaded 2-core machine it still takes well under this.
TOPIC_READY_TIMEOUT_S = 30.0


def create_topic(
    bootstrap: str,
    name: str,
    partitions: int = 1,
    replication: int = 1,
    config: Mapping[str, str] | None = None,
    timeout_s: float = TOPIC_READY_TIMEOUT_S,
) -> str:
    """Create topic `name` and wait until every partition has a leader and a full ISR (a topic
    that already exists with `partitions` partitions is accepted as it is)."""
    from connectors.kafka_client import TopicRole, TopicSpec, ensure_topic, new_admin_client

    admin = new_admin_client({"bootstrap.servers": bootstrap})
    spec = TopicSpec(name, partitions, replication, dict(config or {}))
    role = TopicRole("topic", KafkaClusterError)
    # All replicas in sync, not only leaders: a test that stops a broker next must not lose
    # the only copy of a partition.
    ensure_topic(admin, spec, role, "refuse", timeout_s, all_in_sync=True)
    return name
