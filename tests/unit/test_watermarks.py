"""`end_offsets`: failover errors are retried with a metadata refresh between tries, until the
deadline or until the caller gives up (a fake consumer; pure logic)."""

from __future__ import annotations

import time
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition

from connectors.kafka_client import end_offsets

TP = TopicPartition("t", 0)


class FakeConsumer:
    """Answers watermark requests from a script: an exception to raise, or a (low, high) pair."""

    def __init__(self, answers: list[Any]) -> None:
        self.answers = answers
        self.metadata_refreshes = 0
        self.timeouts: list[float] = []

    def get_watermark_offsets(self, tp: TopicPartition, timeout: float, cached: bool) -> Any:
        assert tp == TP and cached is False
        self.timeouts.append(timeout)
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    def list_topics(self, topic: str, timeout: float) -> None:
        self.metadata_refreshes += 1


def kafka_error(code: int) -> KafkaException:
    return KafkaException(KafkaError(code))


def test_failover_errors_are_retried_after_a_metadata_refresh() -> None:
    consumer = FakeConsumer(
        [kafka_error(KafkaError.NOT_LEADER_FOR_PARTITION), kafka_error(78), None, (3, 9)]
    )
    assert end_offsets(consumer, TP, time.monotonic() + 30) == (3, 9)
    assert consumer.metadata_refreshes == 3
    assert max(consumer.timeouts) <= 2.0, "each try is short, whatever the deadline"


def test_the_last_error_is_raised_once_the_deadline_passes() -> None:
    consumer = FakeConsumer([kafka_error(KafkaError.LEADER_NOT_AVAILABLE)] * 100)
    with pytest.raises(KafkaException) as raised:
        end_offsets(consumer, TP, time.monotonic() + 0.25)
    assert raised.value.args[0].code() == KafkaError.LEADER_NOT_AVAILABLE
    assert 1 < len(consumer.timeouts) < 100


def test_the_caller_can_give_up_at_once() -> None:
    consumer = FakeConsumer([kafka_error(KafkaError.UNKNOWN_TOPIC_OR_PART), (0, 1)])
    with pytest.raises(KafkaException):
        end_offsets(consumer, TP, time.monotonic() + 30, give_up=lambda error: True)
    assert consumer.metadata_refreshes == 0
