"""The broker-selection order of DESIGN.md §8: external, then Testcontainers, then local."""

from __future__ import annotations

from service.dev.brokers import choose_kafka_backend


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
