"""The driver's access check: credentials, TLS and ACLs, before anything else talks to Kafka.

On a secured cluster (any `security.protocol` but PLAINTEXT) every permission the job needs is
asked for once at start-up (`connectors.kafka_client.access`): READ on input topics and consumer
groups; WRITE on output, marker, dead-letter and journal topics (CREATE where the driver creates
them); WRITE on the transactional ids of the Kafka sinks and the Kafka journal, by prefix. A
refusal stops the driver with one message naming the ACL or the setting to fix
(docs/architecture.md, "Clear failures") instead of retrying in librdkafka.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from connectors.kafka_client.access import (
    Need,
    check_credentials,
    check_permissions,
    is_secured,
    silent_admin,
)
from service.driver.replication import job_topics
from service.graph.context import StreamingContext
from service.graph.sources import KafkaInputDStream

# Inputs are read; outputs and dead letters written; the journal and the markers written and
# read back (recovery and the exactly-once check); markers grown to a partition per task (ALTER).
_TOPIC_OPERATIONS = {
    "input": ("READ",),
    "journal": ("WRITE", "READ"),
    "markers": ("WRITE", "READ", "ALTER"),
}


def check_kafka_credentials(settings: Any) -> bool:
    """On a secured cluster, raise `KafkaAuthenticationError` or `KafkaTlsError` when the
    brokers refuse the client. Before the job's context exists: its Kafka clients connect as
    they are made, and librdkafka would log each refused attempt. True: the check passed."""
    conf = settings.kafka.librdkafka_config()
    return is_secured(conf) and check_credentials(conf)


def check_kafka_permissions(settings: Any, ctx: StreamingContext) -> None:
    """Raise a `KafkaAuthorizationError` for the first ACL the job lacks."""
    conf = settings.kafka.librdkafka_config()
    check_permissions(conf, job_needs(settings, ctx, silent_admin(conf)))


def job_needs(settings: Any, ctx: StreamingContext, admin: Any) -> Iterator[Need]:
    """Every permission the job's sources, outputs and journal need."""
    for use in job_topics(settings, ctx, admin):
        why = f"the {use.role} topic of {use.owner}" if use.owner else f"the {use.role} topic"
        for operation in _TOPIC_OPERATIONS.get(use.role, ("WRITE",)):
            yield Need("topic", use.topic, operation, why, creates=use.creates_with is not None)
    for source in ctx.inputs:
        if isinstance(source, KafkaInputDStream):
            group = settings.sources[source.name].group_id or settings.app_id
            yield Need("group", group, "READ", f"the consumer group of source {source.name}")
    if _has_kafka_outputs(ctx):
        # sinks.kafka.KafkaSink.setup reads the brokers' transaction.max.timeout.ms.
        why = "reading the brokers' transaction.max.timeout.ms (Kafka outputs)"
        yield Need("cluster", "kafka-cluster", "DESCRIBE_CONFIGS", why)
        # sinks.kafka.KafkaSink.transactional_id: dstreams.<app>.<output>.<partition>
        prefix = f"dstreams.{settings.app_id}."
        yield Need("transactional-id", prefix, "WRITE", "the Kafka outputs' transactions")
    if settings.journal.type == "kafka":
        # service.journal.kafka.transactional_id: dstreams-journal-<app>
        prefix = f"dstreams-journal-{settings.app_id}"
        yield Need("transactional-id", prefix, "WRITE", "the Kafka journal's transactions")


def _has_kafka_outputs(ctx: StreamingContext) -> bool:
    from sinks.kafka import KafkaSink

    return any(isinstance(getattr(output, "sink", None), KafkaSink) for output in ctx.outputs)
