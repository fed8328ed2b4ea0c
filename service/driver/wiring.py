"""Turns settings into the engine's parts: sources, sinks, journal, dead letters, acknowledger."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from service.errors import ConfigError
from service.graph.context import StreamingContext
from service.graph.plan import BatchPlan
from service.graph.sources import KafkaInputDStream
from service.journal.base import Journal
from sinks.base import Sink

log = logging.getLogger(__name__)
DEAD_LETTER_SUFFIX = ".dead-letters"


def make_kafka_source(settings: Any, ctx: StreamingContext, name: str) -> KafkaInputDStream:
    source = settings.sources.get(name)
    if source is None:
        known = ", ".join(sorted(settings.sources)) or "none"
        msg = (
            f"the job reads source {name!r}, but sources.{name} is not configured (known: {known})"
        )
        raise ConfigError(msg)
    conf = settings.kafka.librdkafka_config()
    conf["group.id"] = source.group_id or settings.app_id
    return ctx.kafka_stream(
        name,
        conf,
        topics=list(source.topics) if source.topics else None,
        pattern=source.pattern,
        starting_offsets=planner_starting_offsets(source.starting_offsets),
        max_rate_per_partition=source.max_rate_per_partition,
        min_partitions=source.min_partitions,
        codec=source.codec,
        fail_on_data_loss=source.fail_on_data_loss,
    )


def planner_starting_offsets(value: Any) -> Any:
    """Config's `{"topic:partition": n}` becomes the planner's `{topic: {partition: n}}`."""
    if not isinstance(value, dict):
        return value
    nested: dict[str, dict[int, int]] = {}
    for where, offset in value.items():
        topic, _, partition = str(where).rpartition(":")
        nested.setdefault(topic, {})[int(partition)] = int(offset)
    return nested


def make_sink(settings: Any, name: str) -> Sink:
    sink = settings.sinks.get(name)
    if sink is None:
        known = ", ".join(sorted(settings.sinks)) or "none"
        msg = f"the job writes output {name!r}, but sinks.{name} is not configured (known: {known})"
        raise ConfigError(msg)
    builder = _SINK_BUILDERS[sink.type]
    return builder(settings, sink)


def _kafka_sink(settings: Any, sink: Any) -> Sink:
    from sinks.kafka import KafkaSink

    partitions = sink.partitions or settings.default_partitions
    return KafkaSink(
        settings.kafka.librdkafka_config(),
        sink.topic,
        partitions=partitions,
        replication_factor=sink.replication_factor,
        transaction_timeout_ms=sink.transaction_timeout_ms,
        marker_partitions=max(partitions, settings.default_partitions),
    )


def _postgres_sink(settings: Any, sink: Any) -> Sink:
    from sinks.postgres import PostgresSink

    return PostgresSink(
        sink.dsn,
        sink.table,
        columns=list(sink.columns),
        key_columns=list(sink.key_columns) or None,
        column_types=getattr(sink, "column_types", None) or None,
    )


def _files_sink(settings: Any, sink: Any) -> Sink:
    from sinks.files import FileSink

    return FileSink(sink.path)


def _console_sink(settings: Any, sink: Any) -> Sink:
    from sinks.console import ConsoleSink

    return ConsoleSink()


_SINK_BUILDERS: dict[str, Callable[[Any, Any], Sink]] = {
    "kafka": _kafka_sink,
    "postgres": _postgres_sink,
    "files": _files_sink,
    "console": _console_sink,
}


def add_dead_letter_outputs(settings: Any, ctx: StreamingContext) -> None:
    """Every Kafka source's undecodable records go to the dead-letter topic, exactly once."""
    from sinks.dead_letters import DeadLetterSink

    config = settings.dead_letter
    sink = DeadLetterSink(
        settings.kafka.librdkafka_config(),
        config.topic,
        partitions=config.partitions,
        replication_factor=config.replication_factor,
    )
    for source in [s for s in ctx.inputs if isinstance(s, KafkaInputDStream)]:
        # One partition: dead letters are rare, and a fixed count keeps the markers simple.
        letters = source.dead_letters().map(to_dead_letter).coalesce(1)
        letters.write(source.name + DEAD_LETTER_SUFFIX, sink)


def to_dead_letter(record: Any) -> Any:
    """A failed `SourceRecord` as a dead letter; `[Type] message` reasons name the user error."""
    from sinks.dead_letters import DeadLetter

    error_type, message = "DecodeError", record.error or ""
    if message.startswith("[") and "] " in message:
        error_type, message = message[1:].split("] ", 1)
    return DeadLetter(
        record.topic, record.partition, record.offset, error_type, message, record.key, record.raw
    )


def make_journal(settings: Any) -> Journal:
    config = settings.journal
    if config.type == "file":
        from service.journal.file import FileJournal

        return FileJournal(Path(config.path))
    from service.journal.kafka import KafkaJournal

    return KafkaJournal(
        settings.kafka.librdkafka_config(),
        config.topic,
        settings.app_id,
        config.replication_factor,
        config.min_insync_replicas,
    )


def make_acknowledger(settings: Any, ctx: StreamingContext) -> Callable[[BatchPlan], None] | None:
    """Commits planned `until`s to each source's consumer group, for lag tools only."""
    sources = [s for s in ctx.inputs if isinstance(s, KafkaInputDStream)]
    if not sources:
        return None
    from confluent_kafka import Consumer, TopicPartition

    consumers: dict[str, Any] = {}

    def acknowledge(plan: BatchPlan) -> None:
        for source in sources:
            group = settings.sources[source.name].group_id or settings.app_id
            consumer = consumers.get(group)
            if consumer is None:
                conf = {**settings.kafka.librdkafka_config(), "group.id": group}
                conf["enable.auto.commit"] = "false"
                consumer = consumers[group] = Consumer(conf)
            offsets = [
                TopicPartition(r.topic, r.partition, r.until_offset)
                for r in plan.source(source.name).ranges
            ]
            if offsets:
                consumer.commit(offsets=offsets, asynchronous=False)

    return acknowledge
