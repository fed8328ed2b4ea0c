"""End offsets of one partition that outlast a leader failover.

During a failover a watermark request can fail (NOT_LEADER, or OFFSET_NOT_AVAILABLE while a new
leader's high watermark catches up) or, sent to a leader that has just died, wait out its whole
timeout. So each try is short, and between tries the topic's metadata is refreshed: only fresh
metadata names the new leader. The committed-tail reads (the sink's markers, the Kafka journal)
and the chaos tests' verifier all read end offsets this way.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from typing import Any

from confluent_kafka import KafkaError, KafkaException, TopicPartition

from connectors.kafka_client.errors import TIMED_OUT, is_fatal

# One try; a request stranded on a dead leader costs no more than this.
TRY_TIMEOUT_S = 2.0
_PAUSE_S = 0.1


def end_offsets(
    consumer: Any,
    tp: TopicPartition,
    deadline: float,
    give_up: Callable[[KafkaError], bool] = is_fatal,
) -> tuple[int, int]:
    """`(low, high)` of `tp`; with `isolation.level=read_committed` high is the last stable offset.

    Errors are retried until the `time.monotonic()` `deadline`, or until `give_up(error)` says
    waiting cannot help; then the last `KafkaException` is raised.
    """
    while True:
        remaining = deadline - time.monotonic()
        try:
            marks = consumer.get_watermark_offsets(
                tp, timeout=max(_PAUSE_S, min(TRY_TIMEOUT_S, remaining)), cached=False
            )
            if marks is None:  # some client versions answer a timeout with None
                raise KafkaException(KafkaError(TIMED_OUT))
            return int(marks[0]), int(marks[1])
        except KafkaException as exc:
            if remaining <= 0 or give_up(exc.args[0]):
                raise
            with contextlib.suppress(KafkaException):
                consumer.list_topics(tp.topic, timeout=TRY_TIMEOUT_S)
            time.sleep(_PAUSE_S)
