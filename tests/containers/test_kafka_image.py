"""The local Kafka image as Testcontainers' own `KafkaContainer` runs it (the session's broker).

What the module's start script relies on is there and did its work: the KRaft properties written
from its environment, the storage it formatted, Apache Kafka 4.1.1 from the project's jars, the
broker advertising the loopback port the engine published and its own address on the bridge.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from service.dev.docker_engine import docker_client
from service.dev.kafka_cluster import KAFKA_VERSION


@pytest.fixture(scope="module")
def container(docker_engine: Any, kafka_on_docker: Any) -> Iterator[Any]:
    """The session broker's container (docker-py)."""
    client = docker_client(docker_engine.docker_host)
    try:
        yield client.containers.get(kafka_on_docker.container_id)
    finally:
        client.close()


def run_in(container: Any, *argv: str) -> str:
    code, output = container.exec_run(list(argv))
    assert code == 0, f"{argv} exited with {code}: {output.decode(errors='replace')}"
    return str(output.decode())


def test_the_testcontainers_script_configured_a_kraft_broker(
    container: Any, kafka_on_docker: Any
) -> None:
    text = run_in(container, "cat", "/etc/kafka/kafka.properties")
    properties = dict(line.split("=", 1) for line in text.splitlines() if line)
    assert properties["process.roles"] == "broker,controller"
    assert properties["node.id"] == "1"
    assert properties["log.dirs"] == "/var/lib/kafka/data"
    advertised = properties["advertised.listeners"].split(",")
    assert advertised == [
        f"PLAINTEXT://{kafka_on_docker.bootstrap}",
        f"BROKER://{kafka_on_docker.network_bootstrap}",
    ]
    # The storage tool the script appended to `configure` formatted the log directory.
    meta = run_in(container, "cat", "/var/lib/kafka/data/meta.properties")
    assert "cluster.id=" in meta
    assert run_in(container, "id", "-u").strip() == "1000"


def test_the_broker_is_apache_kafka_from_the_project_jars(container: Any) -> None:
    jars = run_in(container, "ls", "/opt/kafka/libs").split()
    assert f"kafka_2.13-{KAFKA_VERSION}.jar" in jars
    logs = container.logs().decode(errors="replace")
    assert f"Kafka version: {KAFKA_VERSION}" in logs
    assert "Kafka Server started" in logs
