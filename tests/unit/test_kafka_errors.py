"""The one classification of Kafka client errors (`connectors.kafka_client.errors`)."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError

from connectors.kafka_client import (
    ErrorKind,
    classify,
    is_fatal,
    is_fenced,
    is_retriable,
    is_transient,
)

FENCING = [KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH]
PERMANENT = [
    KafkaError._AUTHENTICATION,
    KafkaError._INVALID_ARG,
    KafkaError._SSL,
    KafkaError.SASL_AUTHENTICATION_FAILED,
    KafkaError.TOPIC_AUTHORIZATION_FAILED,
    KafkaError.CLUSTER_AUTHORIZATION_FAILED,
    KafkaError.GROUP_AUTHORIZATION_FAILED,
]
# Local errors librdkafka reports while brokers fail over, without flagging them retriable.
FAILOVER = [
    KafkaError._TIMED_OUT,
    KafkaError._TRANSPORT,
    KafkaError._ALL_BROKERS_DOWN,
    KafkaError._UNKNOWN_PARTITION,
    KafkaError._DESTROY_BROKER,
    KafkaError.NOT_LEADER_FOR_PARTITION,
]


@pytest.mark.parametrize("code", FENCING)
@pytest.mark.parametrize("fatal", [False, True])
def test_fencing_is_recognised_whether_or_not_librdkafka_calls_it_fatal(
    code: int, fatal: bool
) -> None:
    error = KafkaError(code, fatal=fatal)
    assert classify(error) is ErrorKind.FENCED
    assert is_fenced(error) and is_fatal(error)
    assert not is_transient(error) and not is_retriable(error)


def test_a_fatal_error_is_final_even_when_flagged_retriable() -> None:
    error = KafkaError(KafkaError._FATAL, fatal=True, retriable=True)
    assert classify(error) is ErrorKind.FATAL
    assert is_fatal(error) and not is_fenced(error)
    assert not is_transient(error) and not is_retriable(error)


@pytest.mark.parametrize("code", PERMANENT)
def test_errors_no_wait_can_cure_are_permanent(code: int) -> None:
    error = KafkaError(code)
    assert classify(error) is ErrorKind.PERMANENT
    assert not is_transient(error) and not is_fatal(error) and not is_retriable(error)


def test_a_permanent_error_stays_permanent_when_flagged_retriable() -> None:
    error = KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED, retriable=True)
    assert classify(error) is ErrorKind.PERMANENT
    assert not is_retriable(error)


@pytest.mark.parametrize("code", FAILOVER)
def test_failover_errors_are_transient_but_not_retried_by_librdkafka(code: int) -> None:
    error = KafkaError(code)
    assert classify(error) is ErrorKind.TRANSIENT
    assert is_transient(error) and not is_retriable(error) and not is_fatal(error)


@pytest.mark.parametrize("code", FAILOVER)
def test_errors_librdkafka_retries_are_retriable_and_transient(code: int) -> None:
    error = KafkaError(code, retriable=True)
    assert classify(error) is ErrorKind.RETRIABLE
    assert is_retriable(error) and is_transient(error)
