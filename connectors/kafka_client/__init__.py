"""The one home of Kafka client plumbing that the connectors, the sinks and the journal share.

- `errors`: what a client error means (`classify`: fenced, fatal, permanent, retriable,
  transient) and `TopicRole`, which names a topic and the error to raise in failures about it.
- `watermarks`: `end_offsets` of a partition, waiting out a leader failover.
- `admin`: legal topic names, what the metadata says of topics, `ensure_topic` (create, reconcile
  the partition count, wait for leaders: the one create-and-wait helper) and the brokers'
  settings (`broker_setting`, the transaction time limit).
- `tail`: `CommittedTail`, a ``read_committed`` consumer reading the end of partitions.
- `factory`: every consumer, producer and admin client, each configured in one place (the
  connection and security settings merged once, librdkafka's log lines sent to Python logging).
  No module outside this package constructs a confluent-kafka client.
- `transactions`: `commit_transaction`, which turns a timed-out commit into `CommitTimedOut`:
  fatal for that producer, which is `discard`ed and replaced (`reinitialised`, a new epoch)
  before any further write, since librdkafka lacks KIP-890's transaction hardening.
- `access`: `check_credentials` and `check_permissions`, the start-up check that turns a refused
  login, a failed TLS handshake or a missing ACL into one `KafkaAccessError` naming the fix.

Clients kept across tasks live in `connectors.process_cache`, which is not Kafka-specific.
"""

from connectors.kafka_client.admin import (
    ADMIN_TIMEOUT_S,
    Mismatch,
    TopicSpec,
    TopicState,
    broker_setting,
    broker_transaction_limit,
    check_topic_name,
    describe_topic,
    describe_topics,
    ensure_topic,
    partition_count,
    wait_for_leaders,
)
from connectors.kafka_client.errors import (
    AUTO_OFFSET_RESET,
    FENCING_CODES,
    PARTITION_EOF,
    PERMANENT_CODES,
    ErrorKind,
    TopicRole,
    classify,
    is_fatal,
    is_fenced,
    is_retriable,
    is_transient,
    is_unanswered,
)
from connectors.kafka_client.factory import (
    CLIENT_LOG,
    JAVA_PLACEMENT,
    ClientConf,
    admin_config,
    consumer_config,
    idempotent_producer_config,
    new_admin_client,
    new_consumer,
    new_idempotent_producer,
    new_producer,
    new_transactional_producer,
    transactional_producer_config,
)
from connectors.kafka_client.tail import CommittedTail
from connectors.kafka_client.transactions import (
    CommitTimedOut,
    commit_transaction,
    discard,
    reinitialised,
)
from connectors.kafka_client.watermarks import TRY_TIMEOUT_S, end_offsets

__all__ = [
    "ADMIN_TIMEOUT_S",
    "AUTO_OFFSET_RESET",
    "CLIENT_LOG",
    "FENCING_CODES",
    "JAVA_PLACEMENT",
    "PARTITION_EOF",
    "PERMANENT_CODES",
    "TRY_TIMEOUT_S",
    "ClientConf",
    "CommitTimedOut",
    "CommittedTail",
    "ErrorKind",
    "Mismatch",
    "TopicRole",
    "TopicSpec",
    "TopicState",
    "admin_config",
    "broker_setting",
    "broker_transaction_limit",
    "check_topic_name",
    "classify",
    "commit_transaction",
    "consumer_config",
    "describe_topic",
    "describe_topics",
    "discard",
    "end_offsets",
    "ensure_topic",
    "idempotent_producer_config",
    "is_fatal",
    "is_fenced",
    "is_retriable",
    "is_transient",
    "is_unanswered",
    "new_admin_client",
    "new_consumer",
    "new_idempotent_producer",
    "new_producer",
    "new_transactional_producer",
    "partition_count",
    "reinitialised",
    "transactional_producer_config",
    "wait_for_leaders",
]
