"""What a Kafka client error means for the code that got it: one classification for every client.

librdkafka marks an error fatal (the client instance is finished), retriable (the same call may
succeed later) or abortable (a transaction must be aborted); this module adds the two kinds that
matter to us and that those flags do not show: fencing, and errors no wait can cure.

>>> from confluent_kafka import KafkaError
>>> classify(KafkaError(KafkaError._ALL_BROKERS_DOWN)).name
'TRANSIENT'
>>> classify(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED)).name
'PERMANENT'
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from confluent_kafka import KafkaError

from service.errors import DStreamsError

# librdkafka's local error codes are public API, named with a leading underscore.
PARTITION_EOF: int = KafkaError._PARTITION_EOF  # noqa: SLF001
AUTO_OFFSET_RESET: int = KafkaError._AUTO_OFFSET_RESET  # noqa: SLF001
TIMED_OUT: int = KafkaError._TIMED_OUT  # noqa: SLF001

# A newer producer with the same transactional.id exists: this one can never commit again.
# librdkafka folds the broker's fencing errors into _FENCED; the raw codes are kept in case a
# path reports them unfolded.
FENCING_CODES = frozenset(
    {KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH}  # noqa: SLF001
)

# Authentication, authorization and bad arguments: waiting cannot cure them, so a client that
# waits out failovers must stop on them and say so.
PERMANENT_CODES = frozenset(
    {
        KafkaError._AUTHENTICATION,  # noqa: SLF001
        KafkaError._INVALID_ARG,  # noqa: SLF001
        KafkaError._SSL,  # noqa: SLF001
        KafkaError.SASL_AUTHENTICATION_FAILED,
        KafkaError.TOPIC_AUTHORIZATION_FAILED,
        KafkaError.CLUSTER_AUTHORIZATION_FAILED,
        KafkaError.GROUP_AUTHORIZATION_FAILED,
    }
)

# The cluster did not answer, or had no leader or in-sync replicas to answer with: what a
# broker outage or failover shows, and what ends when the brokers are back.
UNANSWERED_CODES = frozenset(
    {
        KafkaError._ALL_BROKERS_DOWN,  # noqa: SLF001
        KafkaError._TRANSPORT,  # noqa: SLF001
        KafkaError._TIMED_OUT,  # noqa: SLF001
        KafkaError._MSG_TIMED_OUT,  # noqa: SLF001
        KafkaError._WAIT_COORD,  # noqa: SLF001
        KafkaError.REQUEST_TIMED_OUT,
        KafkaError.LEADER_NOT_AVAILABLE,
        KafkaError.NOT_LEADER_FOR_PARTITION,
        KafkaError.NOT_ENOUGH_REPLICAS,
        KafkaError.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
        KafkaError.COORDINATOR_NOT_AVAILABLE,
        KafkaError.NOT_COORDINATOR,
        KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
    }
)


@dataclass(frozen=True)
class TopicRole:
    """What a topic is to the code using it: its name in messages, and the error to raise."""

    kind: str  # e.g. "journal topic", "marker topic"
    error: type[DStreamsError]


class ErrorKind(enum.Enum):
    """The kinds of Kafka client error, from the most final to the most benign."""

    FENCED = "fenced"  # a newer producer holds the transactional.id; make a new producer
    FATAL = "fatal"  # the client instance can do nothing more; make a new one
    PERMANENT = "permanent"  # configuration or authorization; no wait cures it
    RETRIABLE = "retriable"  # librdkafka says the same call may succeed later
    TRANSIENT = "transient"  # not flagged retriable, but a failover or restart explains it


def classify(error: KafkaError) -> ErrorKind:
    """The kind of `error`; the first that applies, in the order of `ErrorKind`.

    While brokers fail over or restart, librdkafka reports many local errors that it does not
    flag retriable (a timeout, a broken connection, every broker down, an "unknown partition"
    whose leader its metadata lost, a broker handle destroyed as the cluster's membership
    changes): those are `TRANSIENT`.
    """
    if error.code() in FENCING_CODES:
        return ErrorKind.FENCED
    if error.fatal():
        return ErrorKind.FATAL
    if error.code() in PERMANENT_CODES:
        return ErrorKind.PERMANENT
    if error.retriable():
        return ErrorKind.RETRIABLE
    return ErrorKind.TRANSIENT


def is_fenced(error: KafkaError) -> bool:
    """Whether a newer producer with the same transactional.id has fenced this one."""
    return classify(error) is ErrorKind.FENCED


def is_fatal(error: KafkaError) -> bool:
    """Whether the client that reported `error` can never succeed again (fenced or fatal)."""
    return classify(error) in (ErrorKind.FENCED, ErrorKind.FATAL)


def is_transient(error: KafkaError) -> bool:
    """Whether waiting (a failover, a restart) may cure `error`: retriable or transient."""
    return classify(error) in (ErrorKind.RETRIABLE, ErrorKind.TRANSIENT)


def is_unanswered(error: KafkaError) -> bool:
    """Whether `error` says the cluster did not answer (down, failing over), not that it refused."""
    return error.code() in UNANSWERED_CODES


def is_retriable(error: KafkaError) -> bool:
    """Whether librdkafka itself will retry: flagged retriable, and neither fatal nor permanent."""
    return classify(error) is ErrorKind.RETRIABLE
