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
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any, TypeAlias

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


Watermarks = tuple[int, int]
PartitionAnswer: TypeAlias = Watermarks | KafkaException | None  # noqa: UP040 - one style here


def partition_watermarks(
    admin: Any, partitions: Sequence[tuple[str, int]], timeout_s: float
) -> dict[tuple[str, int], PartitionAnswer]:
    """`(low, high)` of every partition, high the last stable offset, from two ListOffsets
    requests sent together (the earliest offsets and, read_committed, the latest), not two
    requests per partition: a batch's plan of 32 partitions took ~35 ms one partition at a
    time.

    Per partition: its watermarks; the `KafkaException` its answer failed with (a partition
    whose leader is moving; the caller decides what is transient); or None when no offsets came
    within `timeout_s` (a broker down answers with an invalid offset and no error).
    """
    from confluent_kafka import IsolationLevel
    from confluent_kafka.admin import OffsetSpec

    query = [TopicPartition(topic, partition) for topic, partition in partitions]
    options = {"isolation_level": IsolationLevel.READ_COMMITTED, "request_timeout": timeout_s}
    lows = admin.list_offsets({tp: OffsetSpec.earliest() for tp in query}, **options)
    highs = admin.list_offsets({tp: OffsetSpec.latest() for tp in query}, **options)
    deadline = time.monotonic() + timeout_s
    return {(tp.topic, tp.partition): _pair(lows[tp], highs[tp], deadline) for tp in query}


def _pair(low: Future[Any], high: Future[Any], deadline: float) -> PartitionAnswer:
    try:
        first = low.result(timeout=max(0.0, deadline - time.monotonic()))
        last = high.result(timeout=max(0.0, deadline - time.monotonic()))
    except KafkaException as exc:
        return exc
    except FutureTimeout:
        return None
    low_offset, high_offset = int(first.offset), int(last.offset)
    if low_offset < 0 or high_offset < 0:
        # With its broker down, an answer may carry no error but OFFSET_INVALID (-1001).
        return None
    return low_offset, high_offset
