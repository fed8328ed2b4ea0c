"""The one home of Kafka client plumbing that the connectors, the sinks and the journal share.

- `errors`: what a client error means (`classify`: fenced, fatal, permanent, retriable,
  transient) and `TopicRole`, which names a topic and the error to raise in failures about it.
- `watermarks`: `end_offsets` of a partition, waiting out a leader failover.
- `admin`: legal topic names, partition counts, `ensure_topic` (create, reconcile the partition
  count, wait for leaders) and the brokers' transaction time limit.
- `tail`: `CommittedTail`, a ``read_committed`` consumer reading the end of partitions.
- `access`: `check_credentials` and `check_permissions`, the start-up check that turns a refused
  login, a failed TLS handshake or a missing ACL into one `KafkaAccessError` naming the fix.

Clients kept across tasks live in `connectors.process_cache`, which is not Kafka-specific.
"""

from connectors.kafka_client.admin import (
    ADMIN_TIMEOUT_S,
    Mismatch,
    TopicSpec,
    TopicState,
    broker_transaction_limit,
    check_topic_name,
    describe_topic,
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
)
from connectors.kafka_client.tail import CommittedTail
from connectors.kafka_client.watermarks import TRY_TIMEOUT_S, end_offsets

__all__ = [
    "ADMIN_TIMEOUT_S",
    "AUTO_OFFSET_RESET",
    "FENCING_CODES",
    "PARTITION_EOF",
    "PERMANENT_CODES",
    "TRY_TIMEOUT_S",
    "CommittedTail",
    "ErrorKind",
    "Mismatch",
    "TopicRole",
    "TopicSpec",
    "TopicState",
    "broker_transaction_limit",
    "check_topic_name",
    "classify",
    "describe_topic",
    "end_offsets",
    "ensure_topic",
    "is_fatal",
    "is_fenced",
    "is_retriable",
    "is_transient",
    "partition_count",
    "wait_for_leaders",
]
