"""The broker-selection order (docs/architecture.md, Tests): external, Testcontainers, local."""

from __future__ import annotations

import pytest

from service.dev.brokers import choose_kafka_backend
from service.dev.kafka_cluster import KafkaClusterError


def test_bootstrap_servers_in_environment_choose_the_external_cluster() -> None:
    environ = {"KAFKA_BOOTSTRAP_SERVERS": "kafka-1:9092,kafka-2:9092"}
    assert choose_kafka_backend(environ, docker_available=True) == "external"
    assert choose_kafka_backend(environ, docker_available=False) == "external"


def test_a_docker_engine_chooses_testcontainers() -> None:
    assert choose_kafka_backend({}, docker_available=True) == "testcontainers"


def test_without_either_the_local_cluster_is_chosen() -> None:
    assert choose_kafka_backend({}, docker_available=False) == "local"


def test_a_blank_bootstrap_variable_does_not_count_as_set() -> None:
    environ = {"KAFKA_BOOTSTRAP_SERVERS": "  "}
    assert choose_kafka_backend(environ, docker_available=False) == "local"


def test_a_required_backend_overrides_the_order() -> None:
    environ = {"DSTREAMS_KAFKA_BACKEND": "local", "KAFKA_BOOTSTRAP_SERVERS": "kafka-1:9092"}
    assert choose_kafka_backend(environ, docker_available=True) == "local"
    required = {"DSTREAMS_KAFKA_BACKEND": " Testcontainers "}
    assert choose_kafka_backend(required, docker_available=True) == "testcontainers"


def test_required_testcontainers_without_docker_fails_instead_of_falling_back() -> None:
    with pytest.raises(KafkaClusterError, match="no Docker engine answered"):
        choose_kafka_backend({"DSTREAMS_KAFKA_BACKEND": "testcontainers"}, docker_available=False)


def test_required_external_needs_bootstrap_servers() -> None:
    with pytest.raises(KafkaClusterError, match="needs KAFKA_BOOTSTRAP_SERVERS"):
        choose_kafka_backend({"DSTREAMS_KAFKA_BACKEND": "external"}, docker_available=True)


def test_an_unknown_backend_is_named_with_the_choices() -> None:
    with pytest.raises(KafkaClusterError, match=r"'docker' is not a Kafka backend: use one of ext"):
        choose_kafka_backend({"DSTREAMS_KAFKA_BACKEND": "docker"}, docker_available=True)
