"""The driver's replication check: every topic the job reads or writes, before Spark starts.

Input topics, output and marker topics of Kafka sinks, the dead-letter topic and the Kafka
journal's topic are described (topics not created yet: what the driver would create them with)
and held to `kafka.min_replication_factor` and `kafka.min_insync_replicas`. With
`kafka.require_replication` a shortfall refuses start-up (exit 4, like a damaged journal);
without it, a warning and `dstreams_topic_under_replicated`. See `connectors.replication`.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from connectors.replication import (
    Report,
    Requirement,
    TopicUse,
    enforce,
    matching_topics,
    unique,
)
from service.graph.context import StreamingContext
from service.graph.sources import KafkaInputDStream


def check_replication(settings: Any, ctx: StreamingContext, metrics: Any) -> None:
    """Refuse (`ReplicationInsufficient`) or warn about every under-replicated topic of the job.

    `metrics.set_topic_under_replicated(topic, role, under)` receives each topic's result.
    """
    from connectors.kafka_client import new_admin_client

    kafka = settings.kafka
    admin = new_admin_client(kafka.librdkafka_config())
    report: Report = metrics.set_topic_under_replicated
    enforce(
        admin,
        lambda client: unique(job_topics(settings, ctx, client)),
        Requirement(kafka.min_replication_factor, kafka.min_insync_replicas),
        required=kafka.require_replication,
        bootstrap=kafka.bootstrap_servers,
        report=report,
    )


def job_topics(settings: Any, ctx: StreamingContext, admin: Any) -> Iterator[TopicUse]:
    """The topics of the job's Kafka sources, Kafka outputs (with markers) and Kafka journal."""
    yield from _inputs(settings, ctx, admin)
    yield from _outputs(settings, ctx)
    journal = settings.journal
    if journal.type == "kafka":
        yield TopicUse(
            journal.topic,
            "journal",
            "the Kafka journal",
            creates_with=journal.replication_factor,
            creates_min_insync=journal.min_insync_replicas,
            setting="journal",
        )


def _inputs(settings: Any, ctx: StreamingContext, admin: Any) -> Iterator[TopicUse]:
    for source in ctx.inputs:
        if not isinstance(source, KafkaInputDStream):
            continue
        config = settings.sources[source.name]
        topics = config.topics or matching_topics(admin, config.pattern)
        for topic in topics:
            yield TopicUse(topic, "input", f"source {source.name}")


def _outputs(settings: Any, ctx: StreamingContext) -> Iterator[TopicUse]:
    from sinks.dead_letters import DeadLetterSink
    from sinks.kafka import KafkaSink

    for output in ctx.outputs:
        sink = getattr(output, "sink", None)
        if not isinstance(sink, KafkaSink):
            continue
        dead_letters = isinstance(sink, DeadLetterSink)
        setting = "dead_letter" if dead_letters else f"sinks.{output.name}"
        owner = f"output {output.name}"
        rf = sink.replication_factor
        role = "dead-letters" if dead_letters else "output"
        yield TopicUse(sink.topic, role, owner, creates_with=rf, setting=setting)
        marker_topic = sink.marker_topic_for(ctx.app_id, output.name)
        yield TopicUse(marker_topic, "markers", owner, creates_with=rf, setting=setting)
