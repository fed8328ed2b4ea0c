"""The client factory (`connectors.kafka_client.factory`): the configuration each kind of client
gets, and librdkafka's log lines arriving in Python logging. No broker: clients are pointed at a
closed port, whose refused connection is the log line looked for."""

from __future__ import annotations

import logging
import socket
import time
from collections.abc import Callable
from typing import Any

import pytest

from connectors.kafka_client import factory
from sinks.base import BatchKey
from sinks.kafka import KafkaSink

SECURED = {
    "bootstrap.servers": "b1:9093,b2:9093",
    "security.protocol": "SASL_SSL",
    "sasl.mechanism": "SCRAM-SHA-512",
    "sasl.username": "dstreams",
    "sasl.password": "secret",
    "ssl.ca.location": "/etc/kafka/ca.pem",
}


def test_a_consumer_takes_defaults_under_the_connection_and_its_settings_over_it() -> None:
    config = factory.consumer_config(
        {**SECURED, "fetch.wait.max.ms": 50},
        defaults={"fetch.wait.max.ms": 10, "group.id": "placeholder"},
        settings={"isolation.level": "read_committed"},
    )
    assert config == {
        **SECURED,
        "fetch.wait.max.ms": 50,
        "group.id": "placeholder",
        "isolation.level": "read_committed",
    }


def test_a_transactional_producer_keeps_its_id_idempotence_and_acks_whatever_it_is_given() -> None:
    config = factory.transactional_producer_config(
        {**SECURED, "partitioner": "consistent"},
        "dstreams-journal-app",
        30_000,
        defaults=factory.JAVA_PLACEMENT,
        settings={"linger.ms": 0, "acks": "1", "enable.idempotence": False},
    )
    assert config == {
        **SECURED,
        "partitioner": "consistent",  # the connection settings override a default
        "linger.ms": 0,
        "transactional.id": "dstreams-journal-app",
        "enable.idempotence": True,
        "acks": "all",
        "transaction.timeout.ms": 30_000,
    }


def test_the_kafka_sinks_producers_are_configured_as_before() -> None:
    sink = KafkaSink(dict(SECURED), "counts", transaction_timeout_ms=45_000)
    config = sink.producer_settings(BatchKey("app", "counts", 1000, 3))
    assert config == {
        "partitioner": "murmur2_random",
        **SECURED,
        "transactional.id": sink.transactional_id("app", "counts", 3),
        "enable.idempotence": True,
        "acks": "all",
        "transaction.timeout.ms": 45_000,
    }


def test_idempotent_producers_and_admin_clients_add_only_what_they_need() -> None:
    assert factory.idempotent_producer_config(SECURED) == {**SECURED, "enable.idempotence": True}
    assert factory.admin_config(SECURED, settings={"log.connection.close": False}) == {
        **SECURED,
        "log.connection.close": False,
    }


@pytest.mark.parametrize("key", ["bootstrap.servers", "security.protocol", "sasl.password"])
def test_no_role_may_replace_the_brokers_or_the_security_settings(key: str) -> None:
    with pytest.raises(ValueError, match=f"role settings name {key}"):
        factory.consumer_config(SECURED, settings={key: "elsewhere"})
    with pytest.raises(ValueError, match=f"role settings name {key}"):
        factory.transactional_producer_config(SECURED, "id", 1000, defaults={key: "elsewhere"})


def test_configurations_hold_no_logger_so_cache_keys_stay_stable() -> None:
    configs = [
        factory.consumer_config(SECURED),
        factory.transactional_producer_config(SECURED, "id", 1000),
        factory.idempotent_producer_config(SECURED),
        factory.admin_config(SECURED),
    ]
    assert all("logger" not in config for config in configs)


# --- librdkafka's log lines in Python logging -------------------------------------------------


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def lines_logged(client: Any, caplog: pytest.LogCaptureFixture, logger: str) -> list[str]:
    """Polls `client` (librdkafka hands its log lines over on a poll) until `logger` has some."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        client.poll(0.1)
        found = [r.getMessage() for r in caplog.records if r.name == logger]
        if found:
            return found
    return []


CLIENTS: dict[str, Callable[..., Any]] = {
    "consumer": lambda conf, **log: factory.new_consumer(conf, settings={"group.id": "g"}, **log),
    "transactional producer": lambda conf, **log: factory.new_transactional_producer(
        conf, "id", 1000, **log
    ),
    "idempotent producer": factory.new_idempotent_producer,
    "admin client": factory.new_admin_client,
}


@pytest.mark.parametrize("kind", sorted(CLIENTS))
def test_every_client_logs_through_python_logging(
    kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger=factory.CLIENT_LOG.name)
    client = CLIENTS[kind]({"bootstrap.servers": f"127.0.0.1:{closed_port()}"})
    try:
        lines = lines_logged(client, caplog, factory.CLIENT_LOG.name)
    finally:
        if kind == "consumer":
            client.close()
    assert any("Connection refused" in line for line in lines), lines


def test_a_caller_may_name_its_own_logger(caplog: pytest.LogCaptureFixture) -> None:
    own = logging.getLogger("tests.unit.silenced")
    caplog.set_level(logging.INFO, logger=own.name)
    client = factory.new_admin_client({"bootstrap.servers": f"127.0.0.1:{closed_port()}"}, log=own)
    assert lines_logged(client, caplog, own.name)
    assert not [r for r in caplog.records if r.name == factory.CLIENT_LOG.name]
