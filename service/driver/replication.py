"""The driver's replication check: every topic the job reads or writes, before Spark starts.

Input topics, the topics each output's sink declares (`sinks.base.KafkaNeeds`: a Kafka sink's
output and marker topics, the dead-letter topic) and the Kafka journal's topic are described
(topics not created yet: what the driver would create them with) and held to
`kafka.min_replication_factor` and `kafka.min_insync_replicas`. With `kafka.require_replication` a
shortfall refuses start-up (exit 4, like a damaged journal); without it, a warning and
`dstreams_topic_under_replicated`. See `connectors.replication`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from functools import partial
from typing import Protocol

from connectors.replication import (
    Replication,
    Report,
    TopicUse,
    enforce,
    matching_topics,
    unique,
)
from service.config.settings import Settings
from service.graph.context import StreamingContext
from service.graph.sources import KafkaInputDStream

TopicFinder = Callable[[str], Sequence[str]]
"""The existing topics whose whole name matches a pattern (`matching_topics` of a client)."""


class UnderReplicatedGauge(Protocol):
    """Where each checked topic's result goes (`dstreams_topic_under_replicated`)."""

    def set_topic_under_replicated(self, topic: str, role: str, under: bool) -> None: ...


def check_replication(
    settings: Settings, ctx: StreamingContext, metrics: UnderReplicatedGauge
) -> None:
    """Refuse (`ReplicationInsufficient`) or warn about every under-replicated topic of the job.

    `metrics.set_topic_under_replicated(topic, role, under)` receives each topic's result.
    """
    from connectors.kafka_client import new_admin_client

    kafka = settings.kafka
    admin = new_admin_client(kafka.librdkafka_config())
    report: Report = metrics.set_topic_under_replicated
    enforce(
        admin,
        lambda client: unique(job_topics(settings, ctx, partial(matching_topics, client))),
        Replication(kafka.min_replication_factor, kafka.min_insync_replicas),
        required=kafka.require_replication,
        bootstrap=kafka.bootstrap_servers,
        report=report,
    )


def job_topics(settings: Settings, ctx: StreamingContext, find: TopicFinder) -> Iterator[TopicUse]:
    """The topics of the job's Kafka sources, of its outputs' sinks and of the Kafka journal."""
    yield from input_topics(settings, ctx, find)
    yield from output_topics(ctx)
    if (journal := journal_topic(settings)) is not None:
        yield journal


def journal_topic(settings: Settings) -> TopicUse | None:
    """The Kafka journal's topic; None with another journal."""
    journal = settings.journal
    if journal.type != "kafka":
        return None
    return TopicUse(
        journal.topic,
        "journal",
        "the Kafka journal",
        creates_with=journal.replication_factor,
        creates_min_insync=journal.min_insync_replicas,
        setting="journal",
    )


def input_topics(
    settings: Settings, ctx: StreamingContext, find: TopicFinder
) -> Iterator[TopicUse]:
    """The topics each Kafka source reads: its list, or the existing topics its pattern matches."""
    for source in ctx.inputs:
        if not isinstance(source, KafkaInputDStream):
            continue
        config = settings.sources[source.name]
        topics = config.topics or find(str(config.pattern))
        for topic in topics:
            yield TopicUse(topic, "input", f"source {source.name}")


def output_topics(ctx: StreamingContext) -> Iterator[TopicUse]:
    """The topics every output's sink says it writes (`sinks.base.KafkaNeeds`)."""
    for output in ctx.outputs:
        topics = output.kafka_needs(ctx.app_id).topics
        # The dead-letter sink's topics are configured under dead_letter, any other's under sinks.
        dead_letters = any(topic.role == "dead-letters" for topic in topics)
        setting = "dead_letter" if dead_letters else f"sinks.{output.name}"
        for topic in topics:
            yield TopicUse(
                topic.name,
                topic.role,
                f"output {output.name}",
                creates_with=topic.replication_factor,
                setting=setting,
            )
