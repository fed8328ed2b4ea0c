"""Turns settings into the engine's parts: sources, sinks, journal, dead letters, acknowledger."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from service.config.settings import Settings
from service.config.sinks import SinkBuildContext
from service.errors import ConfigError
from service.graph.context import StreamingContext
from service.graph.kafka_source import KafkaSource
from service.graph.outputs import DEAD_LETTER_SUFFIX
from service.graph.plan import BatchPlan
from service.graph.sources import KafkaInputDStream
from service.journal.base import Journal
from sinks.base import Sink

if TYPE_CHECKING:
    from connectors.reader import SourceRecord
    from sinks.dead_letters import DeadLetter

log = logging.getLogger(__name__)


def make_kafka_source(settings: Settings, name: str) -> KafkaSource:
    """The source configured as `sources.<name>`; its settings model builds it."""
    source = settings.sources.get(name)
    if source is None:
        known = ", ".join(sorted(settings.sources)) or "none"
        msg = (
            f"the job reads source {name!r}, but sources.{name} is not configured (known: {known})"
        )
        raise ConfigError(msg)
    dead_letters = settings.dead_letter.topic is not None
    return source.build(
        name, settings.kafka, settings.app_id, settings.schema_registry, dead_letters=dead_letters
    )


def make_sink(settings: Settings, name: str) -> Sink:
    """The sink configured as `sinks.<name>`; its settings model builds it."""
    sink = settings.sinks.get(name)
    if sink is None:
        known = ", ".join(sorted(settings.sinks)) or "none"
        msg = f"the job writes output {name!r}, but sinks.{name} is not configured (known: {known})"
        raise ConfigError(msg)
    return sink.build(
        SinkBuildContext(
            settings.kafka,
            settings.fixed_partitions,
            settings.schema_registry,
            local_master=settings.spark.parsed_master.is_local,
        )
    )


def add_dead_letter_outputs(settings: Settings, ctx: StreamingContext) -> None:
    """Every Kafka source's undecodable records go to the dead-letter topic, exactly once."""
    sink = settings.dead_letter.build(
        settings.kafka, local_master=settings.spark.parsed_master.is_local
    )
    for source in [s for s in ctx.inputs if isinstance(s, KafkaInputDStream)]:
        # One partition: dead letters are rare, and a fixed count keeps the markers simple.
        letters = source.dead_letters().map(to_dead_letter).coalesce(1)
        letters.write(source.name + DEAD_LETTER_SUFFIX, sink)


def to_dead_letter(record: SourceRecord) -> DeadLetter:
    """A failed `SourceRecord` as a dead letter; `[Type] message` reasons name the user error."""
    from sinks.dead_letters import DeadLetter

    error_type, message = "DecodeError", record.error or ""
    if message.startswith("[") and "] " in message:
        error_type, message = message[1:].split("] ", 1)
    return DeadLetter(
        record.topic, record.partition, record.offset, error_type, message, record.key, record.raw
    )


def make_journal(settings: Settings) -> Journal:
    """The journal configured as `journal`; its settings model builds it."""
    return settings.journal.build(settings.app_id, settings.kafka)


def make_acknowledger(
    settings: Settings, ctx: StreamingContext
) -> Callable[[BatchPlan], None] | None:
    """Commits planned `until`s to each source's consumer group, for lag tools only."""
    sources = [s for s in ctx.inputs if isinstance(s, KafkaInputDStream)]
    if not sources:
        return None
    from confluent_kafka import TopicPartition

    from connectors.kafka_client import new_consumer

    consumers: dict[str, Any] = {}

    def acknowledge(plan: BatchPlan) -> None:
        for source in sources:
            group = settings.sources[source.name].group_id or settings.app_id
            consumer = consumers.get(group)
            if consumer is None:
                conf = settings.kafka.librdkafka_config()
                committing = {"group.id": group, "enable.auto.commit": "false"}
                consumer = consumers[group] = new_consumer(conf, settings=committing)
            offsets = [
                TopicPartition(r.topic, r.partition, r.until_offset)
                for r in plan.source(source.name).ranges
            ]
            if offsets:
                consumer.commit(offsets=offsets, asynchronous=False)

    return acknowledge
