"""Topic administration: legal names, what a topic looks like now, and a topic made ready to use.

`ensure_topic` creates a topic if it is missing, reconciles its partition count with the one
configured, and waits until every partition has a leader: the controller acknowledges a
creation before every broker knows the topic, and a client started at once could otherwise
find no partitions, or no leader, and fail.

Topics are always described by listing all of them: a metadata request that names a missing
topic makes brokers with ``auto.create.topics.enable`` create it with their defaults (one
partition, an unrelated cleanup policy), which nothing here could repair.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import ConfigResource, NewPartitions, NewTopic, ResourceType

from connectors.kafka_client.errors import TopicRole
from service.errors import ConfigError

# Metadata and admin requests take milliseconds; creating a topic or fencing a producer 0.1-1 s
# here. A cluster slower than this is unavailable.
ADMIN_TIMEOUT_S = 30.0

Mismatch = Literal["grow", "keep", "refuse"]
"""What `ensure_topic` does with an existing topic of another partition count: add partitions
(when it has fewer; more are kept), keep it with a warning, or refuse it."""

_TOPIC_NAME = re.compile(r"^[A-Za-z0-9._-]{1,249}$")
_LOG = logging.getLogger(__name__)


@dataclass(frozen=True)
class TopicSpec:
    """A topic as its user configures it."""

    name: str
    partitions: int
    replication_factor: int
    config: Mapping[str, str] = field(default_factory=dict)


class TopicState(NamedTuple):
    """A topic as the cluster's metadata shows it now."""

    exists: bool
    leaders: list[int]  # by partition; -1 while a partition has none
    error: Any  # the topic's KafkaError, or None


def check_topic_name(name: str, what: str) -> None:
    """Raise `ConfigError` unless `name` is a legal Kafka topic name."""
    if not _TOPIC_NAME.match(name) or name in {".", ".."}:
        msg = (
            f"{what} {name!r} is not a legal Kafka topic name; expected 1-249 characters from "
            "[A-Za-z0-9._-]; rename the app or output, or name the topic explicitly"
        )
        raise ConfigError(msg)


def describe_topic(client: Any, topic: str, timeout_s: float = ADMIN_TIMEOUT_S) -> TopicState:
    """What the metadata says of `topic` now; any client (admin, producer, consumer) can ask."""
    found = client.list_topics(timeout=timeout_s).topics.get(topic)
    if found is None:
        return TopicState(exists=False, leaders=[], error=None)
    leaders = [found.partitions[p].leader for p in sorted(found.partitions)]
    return TopicState(exists=True, leaders=leaders, error=found.error)


def partition_count(client: Any, topic: str, timeout_s: float = ADMIN_TIMEOUT_S) -> int:
    """How many partitions `topic` has now; 0 if it does not exist or cannot be described."""
    state = describe_topic(client, topic, timeout_s)
    return 0 if state.error is not None else len(state.leaders)


def broker_transaction_limit(admin: Any, timeout_s: float = ADMIN_TIMEOUT_S) -> int:
    """The smallest `transaction.max.timeout.ms` among the cluster's brokers."""
    brokers = sorted(admin.list_topics(timeout=timeout_s).brokers)
    limits = []
    for broker in brokers:
        # One BROKER resource per call: librdkafka refuses several (_CONFLICT).
        resource = ConfigResource(ResourceType.BROKER, str(broker))
        future = admin.describe_configs([resource], request_timeout=timeout_s)[resource]
        limits.append(int(future.result(timeout_s)["transaction.max.timeout.ms"].value))
    return min(limits)


def ensure_topic(
    admin: Any,
    spec: TopicSpec,
    role: TopicRole,
    mismatch: Mismatch,
    timeout_s: float = ADMIN_TIMEOUT_S,
) -> None:
    """Create `spec`'s topic if missing, reconcile its partition count, wait for its leaders."""
    state = describe_topic(admin, spec.name, timeout_s)
    if state.error is not None and not state.error.retriable():
        msg = (
            f"cannot describe {role.kind} {spec.name!r}: {state.error.str()}; expected the "
            "client to be allowed to describe it. Check the ACLs of this principal."
        )
        raise role.error(msg)
    expected = len(state.leaders)
    if not state.exists:
        _create(admin, spec, role, timeout_s)
        expected = spec.partitions
    elif not state.leaders:  # it exists, but its partitions are not known yet
        expected = spec.partitions
    elif expected != spec.partitions:
        expected = _reconcile(admin, spec, expected, role, mismatch, timeout_s)
    wait_for_leaders(admin, spec.name, expected, role, timeout_s)


def wait_for_leaders(
    client: Any, topic: str, partitions: int, role: TopicRole, timeout_s: float = ADMIN_TIMEOUT_S
) -> None:
    """Block until `topic` has `partitions` partitions, each with a leader in the metadata."""
    deadline = time.monotonic() + timeout_s
    while True:
        leaders = describe_topic(client, topic, timeout_s).leaders
        if len(leaders) >= partitions and min(leaders, default=0) >= 0:
            return
        if time.monotonic() > deadline:
            msg = (
                f"{role.kind} {topic!r} still lacks partitions or leaders after {timeout_s:.0f} s "
                f"(leaders {leaders}, expected {partitions} partitions); expected the brokers of "
                "its replicas to be up. Check the brokers."
            )
            raise role.error(msg)
        time.sleep(0.1)


def _create(admin: Any, spec: TopicSpec, role: TopicRole, timeout_s: float) -> None:
    rf = spec.replication_factor
    topic = NewTopic(spec.name, spec.partitions, rf, config=dict(spec.config))
    future = admin.create_topics([topic], operation_timeout=timeout_s)[spec.name]
    what = f"creating {role.kind} {spec.name!r} ({spec.partitions} partitions, replication {rf})"
    # Another process creating the same topic at the same time is no failure.
    _settle(future, KafkaError.TOPIC_ALREADY_EXISTS, what, role, timeout_s)
    _LOG.info(
        "created %s %s (%d partitions, replication %d)", role.kind, spec.name, spec.partitions, rf
    )


def _reconcile(
    admin: Any, spec: TopicSpec, count: int, role: TopicRole, mismatch: Mismatch, timeout_s: float
) -> int:
    """The partition count to wait for, after growing the topic if `mismatch` allows it."""
    if mismatch == "refuse":
        msg = (
            f"{role.kind} {spec.name!r} has {count} partitions; expected exactly "
            f"{spec.partitions}. Name a new topic, or re-create this one with that many."
        )
        raise role.error(msg)
    if mismatch == "grow" and count < spec.partitions:
        future = admin.create_partitions([NewPartitions(spec.name, spec.partitions)])[spec.name]
        what = f"growing {role.kind} {spec.name!r} from {count} to {spec.partitions} partitions"
        _settle(future, None, what, role, timeout_s)
        _LOG.info("%s", what.replace("growing", "grew", 1))
        return spec.partitions
    if mismatch == "keep":  # with "grow", more partitions than configured is what growing leaves
        _LOG.warning(
            "%s %s has %d partitions, configured %d; kept",
            role.kind,
            spec.name,
            count,
            spec.partitions,
        )
    return count


def _settle(
    future: Any, tolerated: int | None, what: str, role: TopicRole, timeout_s: float
) -> None:
    """Wait for an admin request; the `tolerated` error code is no failure."""
    try:
        future.result(timeout_s)
    except KafkaException as exc:
        if tolerated is None or exc.args[0].code() != tolerated:
            msg = (
                f"{what} failed: {exc.args[0].str()}; check the broker logs, the topic settings "
                "and the client's ACLs"
            )
            raise role.error(msg) from exc
