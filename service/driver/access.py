"""The driver's access check: credentials, TLS and ACLs, before anything else talks to Kafka.

On a secured cluster (any `security.protocol` but PLAINTEXT) every permission the job needs is
asked for once at start-up (`connectors.kafka_client.access`): READ on input topics and consumer
groups; what each output's sink declares (`sinks.base.KafkaNeeds`: WRITE on its topics, READ on
those it reads back, WRITE on its transactional ids by prefix, DescribeConfigs on the cluster);
WRITE and READ on the Kafka journal's topic and WRITE on its transactional id. A refusal stops
the driver with one message naming the ACL or the setting to fix (docs/architecture.md, "Clear
failures") instead of retrying in librdkafka.
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import partial

from connectors.kafka_client.access import (
    Need,
    check_credentials,
    check_permissions,
    is_secured,
    silent_admin,
)
from connectors.replication import matching_topics
from service.config.settings import Settings
from service.driver.replication import TopicFinder, input_topics, journal_topic
from service.graph.context import StreamingContext
from service.graph.sources import KafkaInputDStream
from service.journal.kafka import transactional_id_prefix

_RESOURCE_ORDER = {"topic": 0, "group": 1, "cluster": 2, "transactional-id": 3}


def check_kafka_credentials(settings: Settings) -> bool:
    """On a secured cluster, raise `KafkaAuthenticationError` or `KafkaTlsError` when the
    brokers refuse the client. Before the job's context exists: its Kafka clients connect as
    they are made, and librdkafka would log each refused attempt. True: the check passed."""
    conf = settings.kafka.librdkafka_config()
    return is_secured(conf) and check_credentials(conf)


def check_kafka_permissions(settings: Settings, ctx: StreamingContext) -> None:
    """Raise a `KafkaAuthorizationError` for the first ACL the job lacks."""
    conf = settings.kafka.librdkafka_config()
    find = partial(matching_topics, silent_admin(conf))
    check_permissions(conf, job_needs(settings, ctx, find))


def job_needs(settings: Settings, ctx: StreamingContext, find: TopicFinder) -> list[Need]:
    """Every permission the job's sources, outputs and journal need, each once."""
    needs = [*_source_needs(settings, ctx, find), *_output_needs(ctx), *_journal_needs(settings)]
    # Topics first, then groups, the cluster and transactional ids, each kind in job order.
    return sorted(dict.fromkeys(needs), key=lambda need: _RESOURCE_ORDER[need.resource])


def _source_needs(settings: Settings, ctx: StreamingContext, find: TopicFinder) -> Iterator[Need]:
    for use in input_topics(settings, ctx, find):
        yield Need("topic", use.topic, "READ", f"the input topic of {use.owner}")
    for source in ctx.inputs:
        if isinstance(source, KafkaInputDStream):
            group = settings.sources[source.name].group_id or settings.app_id
            yield Need("group", group, "READ", f"the consumer group of source {source.name}")


def _output_needs(ctx: StreamingContext) -> Iterator[Need]:
    """What each output's sink declares it needs of Kafka (topics it creates when missing)."""
    for output in ctx.outputs:
        needs = output.kafka_needs(ctx.app_id)
        for topic in needs.topics:
            why = f"the {topic.role} topic of output {output.name}"
            for operation in topic.operations:
                yield Need("topic", topic.name, operation, why, creates=True)
        if needs.reads_broker_configs:
            # e.g. sinks.kafka.KafkaSink.setup reads the brokers' transaction.max.timeout.ms.
            why = "reading the brokers' transaction.max.timeout.ms (Kafka outputs)"
            yield Need("cluster", "kafka-cluster", "DESCRIBE_CONFIGS", why)
        if needs.transactional_id_prefix is not None:
            prefix = needs.transactional_id_prefix
            yield Need("transactional-id", prefix, "WRITE", "the Kafka outputs' transactions")


def _journal_needs(settings: Settings) -> Iterator[Need]:
    use = journal_topic(settings)
    if use is None:
        return
    # The journal is written, and read back by recovery.
    for operation in ("WRITE", "READ"):
        yield Need("topic", use.topic, operation, f"the journal topic of {use.owner}", creates=True)
    prefix = transactional_id_prefix(settings.app_id)
    yield Need("transactional-id", prefix, "WRITE", "the Kafka journal's transactions")
