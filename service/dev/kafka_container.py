"""A single-broker Kafka in a container, run by Testcontainers' own `KafkaContainer` (KRaft mode).

The image is the project's local Kafka image (service/dev/images.py), built on first use; the
module runs it exactly as it would run Confluent's image. The broker is reachable twice: from
this machine through the port the engine publishes on loopback (`bootstrap`), and from other
containers on the engine's bridge through the container's own address (`network_bootstrap`),
which the broker advertises on its second listener.

    with docker_engine() as engine, kafka_on_docker(engine) as kafka:
        create_topic(kafka.bootstrap, "lines")
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from service.dev.docker_engine import DockerEngine, docker_client, engine_environment
from service.dev.images import ImageBuilder

# The listener Testcontainers configures for other containers (BROKER://<container IP>:9092).
NETWORK_PORT = 9092
# The broker starts in 5-10 s on an idle machine; the first start on a loaded 2-core runner, with
# cold page caches for the JRE and the jars, takes several times that.
START_TIMEOUT_S = 120


@dataclass(frozen=True)
class KafkaOnDocker:
    """A running broker: `bootstrap` for this machine, `network_bootstrap` for containers."""

    bootstrap: str
    network_bootstrap: str
    image: str
    container_id: str


def kafka_image(engine: DockerEngine) -> str:
    """The local Kafka image in `engine`, built when missing."""
    client = docker_client(engine.docker_host)
    try:
        return ImageBuilder.for_engine(client, engine, _log).kafka_image()
    finally:
        client.close()


@contextmanager
def kafka_on_docker(engine: DockerEngine) -> Iterator[KafkaOnDocker]:
    """Start the broker, yield its addresses, and remove the container afterwards."""
    with engine_environment(engine), _testcontainers_settings():
        from testcontainers.community.kafka import KafkaContainer

        image = kafka_image(engine)
        container = (
            KafkaContainer(image=image)
            .with_kraft()
            # One broker cannot hold the default RF=3 / min ISR 2 transaction log.
            .with_env("KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR", "1")
            .with_env("KAFKA_TRANSACTION_STATE_LOG_MIN_ISR", "1")
        )
        try:
            container.start(timeout=START_TIMEOUT_S)
            container_id = container.get_wrapped_container().id
            address = container.get_docker_client().bridge_ip(container_id)
            yield KafkaOnDocker(
                bootstrap=str(container.get_bootstrap_server()),
                network_bootstrap=f"{address}:{NETWORK_PORT}",
                image=image,
                container_id=str(container_id),
            )
        finally:
            container.stop()


@contextmanager
def _testcontainers_settings() -> Iterator[None]:
    """Testcontainers' host and connection mode as the environment now says.

    The library reads TC_HOST and TESTCONTAINERS_CONNECTION_MODE once, when it is first
    imported; an engine chosen later in the same process sets them afterwards.
    """
    from testcontainers.core.config import ConnectionMode, testcontainers_config

    saved = (testcontainers_config.tc_host_override, testcontainers_config.connection_mode_override)
    host = os.environ.get("TC_HOST") or os.environ.get("TESTCONTAINERS_HOST_OVERRIDE")
    mode = os.environ.get("TESTCONTAINERS_CONNECTION_MODE")
    testcontainers_config.tc_host_override = host or None
    testcontainers_config.connection_mode_override = ConnectionMode(mode) if mode else None
    try:
        yield
    finally:
        testcontainers_config.tc_host_override, testcontainers_config.connection_mode_override = (
            saved
        )


def _log(line: str) -> None:
    print(f"dstreams: {line}", file=sys.stderr, flush=True)
