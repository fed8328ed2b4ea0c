"""Test doubles shipped with the package: golden per-batch runs without Kafka or a journal.

A whole job runs the same way with `service.testing.jobs.run_job`, and the pytest plugin
(`service.testing.pytest_plugin`) gives tests the Spark, Kafka, PostgreSQL and service fixtures.

    >>> run_batches(sc, [["a b", "a"], [], ["b"]],
    ...             lambda s: s.flat_map(str.split).count_by_value())  # doctest: +SKIP
    [[('a', 2), ('b', 1)], [], [('b', 1)]]

Each input list is one batch (empty batches are kept), and each output list is what the graph
wrote for that batch, sorted so that comparisons do not depend on partitioning.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from service.driver.lifecycle import BatchLifecycle
from service.graph.context import StreamingContext
from service.graph.dstream import DStream
from sinks.memory import MemorySink

INTERVAL_MS = 1000
FIRST_BATCH_MS = 1_000_000


def run_batches(
    sc: Any,
    inputs: list[list[Any]],
    build: Callable[[DStream], DStream],
    *,
    default_partitions: int = 2,
    sort: bool = True,
) -> list[list[Any]]:
    """Feeds one list per batch through `build` and returns what each batch wrote."""
    ctx = StreamingContext(sc, "golden", INTERVAL_MS, default_partitions)
    sink = MemorySink()
    build(ctx.queue_stream(inputs)).write("out", sink)
    run_contexts(ctx, len(inputs))
    batches = sink.batches("out")
    return [sorted(batch, key=repr) for batch in batches] if sort else batches


def run_contexts(
    ctx: StreamingContext, count: int, *, first_batch_ms: int = FIRST_BATCH_MS
) -> None:
    """Runs `count` batches of an already built context, in order, with no journal: the first
    at `first_batch_ms`, each next one the context's batch interval later."""
    lifecycle = BatchLifecycle(ctx, journal=None)
    lifecycle.setup_outputs()
    for index in range(count):
        lifecycle.run_new(first_batch_ms + index * ctx.batch_interval_ms)


def unpersist_all(sc: Any) -> None:
    """Releases every RDD cached in `sc` (windows and state cache theirs), so that one test's
    RDDs do not stay in the session's Spark for the next."""
    for rdd in list(sc._jsc.getPersistentRDDs().values()):  # noqa: SLF001 - py4j's view of them
        rdd.unpersist()


def run_two_streams(
    sc: Any,
    left: list[list[Any]],
    right: list[list[Any]],
    build: Callable[[DStream, DStream], DStream],
) -> list[list[Any]]:
    """Like `run_batches` for operators of two streams (join, union)."""
    ctx = StreamingContext(sc, "golden", INTERVAL_MS, 2)
    sink = MemorySink()
    stream = build(ctx.queue_stream(left, "left"), ctx.queue_stream(right, "right"))
    stream.write("out", sink)
    run_contexts(ctx, max(len(left), len(right)))
    return [sorted(batch, key=repr) for batch in sink.batches("out")]


def produce_lines(
    bootstrap: str,
    topic: str,
    partitions: int,
    lines_per_partition: int,
    vocabulary: list[str],
    seed: int,
) -> dict[int, list[str]]:
    """Writes 1–6-word lines to each partition; returns them by partition in offset order, so a
    test can work out what any offset range holds."""
    import random

    from connectors.kafka_client import new_idempotent_producer

    rng = random.Random(seed)  # noqa: S311 - test data
    producer = new_idempotent_producer({"bootstrap.servers": bootstrap})
    lines: dict[int, list[str]] = {p: [] for p in range(partitions)}
    for partition in range(partitions):
        for _ in range(lines_per_partition):
            line = " ".join(rng.choice(vocabulary) for _ in range(rng.randint(1, 6)))
            producer.produce(topic, line.encode(), partition=partition)
            lines[partition].append(line)
    if producer.flush(30) != 0:
        msg = f"could not deliver the test lines to {topic} within 30 s"
        raise RuntimeError(msg)
    return lines


def group_offsets(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    """The offsets consumer group `group` has committed on `topic`, by partition (negative where
    none): what lag tools read, and the service commits after each completed batch."""
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition

    from connectors.kafka_client import new_admin_client

    admin = new_admin_client({"bootstrap.servers": bootstrap})
    wanted = [TopicPartition(topic, p) for p in range(partitions)]
    request = ConsumerGroupTopicPartitions(group, wanted)
    result = admin.list_consumer_group_offsets([request])[group].result(timeout=30)
    return {tp.partition: int(tp.offset) for tp in result.topic_partitions}
