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
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any, Literal

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
    """Create topic `name` and wait until every partition has a leader and a full ISR."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    topic = NewTopic(
        name,
        num_partitions=partitions,
        replication_factor=replication,
        config=dict(config or {}),
    )
    futures = admin.create_topics([topic], operation_timeout=timeout_s, request_timeout=timeout_s)
    futures[name].result(timeout=timeout_s)
    _wait_until_usable(admin, name, partitions, replication, time.monotonic() + timeout_s)
    return name


def _wait_until_usable(
    admin: Any, name: str, partitions: int, replication: int, deadline: float
) -> None:
    # The controller acknowledges creation before every broker has the new metadata; a producer
    # started now could see "unknown topic" and a consumer could miss the first assignment.
    found = "no metadata"
    while time.monotonic() < deadline:
        found = _partition_state(admin, name, partitions, replication)
        if not found:
            return
        time.sleep(0.1)
    msg = (
        f"expected topic {name!r} to have {partitions} partition(s), each with a leader and "
        f"{replication} in-sync replica(s), but {found}. Check the brokers' logs."
    )
    raise KafkaClusterError(msg)


def _partition_state(admin: Any, name: str, partitions: int, replication: int) -> str:
    """An empty string when the topic is usable, else what is still missing."""
    metadata = admin.list_topics(topic=name, timeout=5)
    topic = metadata.topics.get(name)
    if topic is None or topic.error is not None:
        return f"metadata says {topic.error if topic else 'no such topic'}"
    if len(topic.partitions) != partitions:
        return f"metadata lists {len(topic.partitions)} partition(s)"
    for partition in topic.partitions.values():
        if partition.leader < 0 or len(partition.isrs) < replication:
            return f"partition {partition.id} has leader {partition.leader}, ISR {partition.isrs}"
    return ""
