"""Topic administration: legal names, what a topic looks like now, and a topic made ready to use.

`ensure_topic` creates a topic if it is missing, reconciles its partition count with the one
configured, and waits until every partition has a leader: the controller acknowledges a
creation before every broker knows the topic, and a client started at once could otherwise
find no partitions, or no leader, and fail. An existing topic whose safety settings (`kept`: a
journal's unlimited retention, a marker topic's compaction) were changed is refused, naming the
`kafka-configs` command that restores them: under other settings the brokers could delete
records that are still needed, and nothing would notice until a recovery.

Topics are always described by listing all of them: a metadata request that names a missing
topic makes brokers with ``auto.create.topics.enable`` create it with their defaults (one
partition, an unrelated cleanup policy), which nothing here could repair.
"""

from __future__ import annotations

import contextlib
import logging
import re
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import ConfigResource, NewPartitions, NewTopic, ResourceType

from connectors.kafka_client.errors import TopicRole, is_unanswered
from service.errors import ConfigError

# Metadata and admin requests take milliseconds; creating a topic or fencing a producer 0.1-1 s
# here. A cluster slower than this is unavailable.
ADMIN_TIMEOUT_S = 30.0
# One broker's answer about its own settings; a broker that does not answer within this is skipped.
_BROKER_TRY_S = 5.0

Mismatch = Literal["grow", "keep", "refuse"]
"""What `ensure_topic` does with an existing topic of another partition count: add partitions
(when it has fewer; more are kept), keep it with a warning, or refuse it."""

_TOPIC_NAME = re.compile(r"^[A-Za-z0-9._-]{1,249}$")
_LOG = logging.getLogger(__name__)


@dataclass(frozen=True)
class TopicSpec:
    """A topic as its user configures it: what `ensure_topic` creates when it is missing, and
    what it checks an existing topic against (the partition count, and the `kept` settings)."""

    name: str
    partitions: int
    replication_factor: int
    config: Mapping[str, str] = field(default_factory=dict)
    kept: tuple[str, ...] = ()
    """The keys of `config` an existing topic must still have as configured (see the module
    docstring); the others are only what a created topic starts with."""


class TopicState(NamedTuple):
    """A topic as the cluster's metadata shows it now."""

    exists: bool
    leaders: list[int]  # by partition; -1 while a partition has none
    error: Any  # the topic's KafkaError, or None
    replicas: list[int]  # by partition: how many replicas it has
    in_sync: list[int]  # by partition: how many of them are in sync


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
    return describe_topics(client, [topic], timeout_s)[topic]


def describe_topics(
    client: Any, topics: Iterable[str], timeout_s: float = ADMIN_TIMEOUT_S
) -> dict[str, TopicState]:
    """What one metadata request says of each of `topics` now."""
    listed = client.list_topics(timeout=timeout_s).topics
    return {topic: _state(listed.get(topic)) for topic in topics}


def _state(found: Any) -> TopicState:
    if found is None:
        return TopicState(exists=False, leaders=[], error=None, replicas=[], in_sync=[])
    partitions = [found.partitions[p] for p in sorted(found.partitions)]
    return TopicState(
        exists=True,
        leaders=[p.leader for p in partitions],
        error=found.error,
        replicas=[len(p.replicas) for p in partitions],
        in_sync=[len(p.isrs) for p in partitions],
    )


def partition_count(client: Any, topic: str, timeout_s: float = ADMIN_TIMEOUT_S) -> int:
    """How many partitions `topic` has now; 0 if it does not exist or cannot be described."""
    state = describe_topic(client, topic, timeout_s)
    return 0 if state.error is not None else len(state.leaders)


def broker_transaction_limit(admin: Any, timeout_s: float = ADMIN_TIMEOUT_S) -> int:
    """The smallest `transaction.max.timeout.ms` among the cluster's brokers."""
    return broker_setting(admin, "transaction.max.timeout.ms", timeout_s)


def broker_setting(admin: Any, name: str, timeout_s: float = ADMIN_TIMEOUT_S) -> int:
    """The lowest value of the integer broker setting `name` among the brokers that answer, e.g.
    `default.replication.factor` (what a topic created with replication factor -1 gets).

    A broker that has just died is still listed for a few seconds; it is skipped. `RuntimeError`
    when no broker answers."""
    values, failures = [], []
    for broker in sorted(admin.list_topics(timeout=timeout_s).brokers):
        # One BROKER resource per request: librdkafka refuses several in one (_CONFLICT).
        resource = ConfigResource(ResourceType.BROKER, str(broker))
        future = admin.describe_configs([resource], request_timeout=_BROKER_TRY_S)[resource]
        try:
            values.append(int(future.result(_BROKER_TRY_S)[name].value))
        except Exception as error:  # this broker is down or slow; another one will do
            failures.append(f"broker {broker}: {type(error).__name__}: {error}")
    if not values:
        msg = f"no broker answered for {name} ({'; '.join(failures) or 'no brokers listed'})"
        raise RuntimeError(msg)
    return min(values)


def topic_configs(
    admin: Any, topics: Iterable[str], timeout_s: float = ADMIN_TIMEOUT_S
) -> dict[str, dict[str, Any]]:
    """The configuration entries of each of `topics`, by topic.

    librdkafka sends DescribeConfigs of topics to the controller its metadata names, and a
    controller that has just died (listed until the cluster fences it, 4-9 s) is waited for
    until the request's timeout. So each try is short, and between tries fresh metadata names a
    live one; errors other than an unanswering cluster are raised at once."""
    resources = [ConfigResource(ResourceType.TOPIC, topic) for topic in topics]
    deadline = time.monotonic() + timeout_s
    while True:
        try_s = max(0.1, min(_BROKER_TRY_S, deadline - time.monotonic()))
        futures = admin.describe_configs(resources, request_timeout=try_s)
        try:
            return {r.name: future.result(try_s + 1) for r, future in futures.items()}
        except KafkaException as exc:
            if time.monotonic() + 0.1 >= deadline or not is_unanswered(exc.args[0]):
                raise
            _LOG.info("describing topic configurations: %s; asking again", exc.args[0].str())
        with contextlib.suppress(KafkaException):
            admin.list_topics(timeout=try_s)  # fresh metadata: the controller it names now


def ensure_topic(
    admin: Any,
    spec: TopicSpec,
    role: TopicRole,
    mismatch: Mismatch,
    timeout_s: float = ADMIN_TIMEOUT_S,
    *,
    all_in_sync: bool = False,
) -> None:
    """Create `spec`'s topic if missing, reconcile its partition count, wait for its leaders
    (and, with `all_in_sync`, for every replica of every partition to be in sync)."""
    state = describe_topic(admin, spec.name, timeout_s)
    if state.error is not None and not state.error.retriable():
        msg = (
            f"cannot describe {role.kind} {spec.name!r}: {state.error.str()}; expected the "
            "client to be allowed to describe it. Check the ACLs of this principal."
        )
        raise role.error(msg)
    expected = len(state.leaders)
    if state.exists:
        check_kept_config(admin, spec, role, timeout_s)
    if not state.exists:
        _create(admin, spec, role, timeout_s)
        expected = spec.partitions
    elif not state.leaders:  # it exists, but its partitions are not known yet
        expected = spec.partitions
    elif expected != spec.partitions:
        expected = _reconcile(admin, spec, expected, role, mismatch, timeout_s)
    in_sync = spec.replication_factor if all_in_sync else 0
    wait_for_leaders(admin, spec.name, expected, role, timeout_s, in_sync=in_sync)


def check_kept_config(
    admin: Any, spec: TopicSpec, role: TopicRole, timeout_s: float = ADMIN_TIMEOUT_S
) -> None:
    """Refuse `spec`'s existing topic if a setting in `spec.kept` differs from `spec.config`."""
    if not spec.kept:
        return
    found = topic_config(admin, spec.name, role, timeout_s)
    wrong = [key for key in spec.kept if found.get(key) != spec.config[key]]
    if not wrong:
        return
    has = ", ".join(f"{key}={found.get(key)}" for key in wrong)
    wanted = ",".join(f"{key}={spec.config[key]}" for key in wrong)
    msg = (
        f"{role.kind} {spec.name!r} has {has}; expected {wanted.replace(',', ', ')}: under "
        "these settings the brokers may delete (by retention or compaction) records dstreams "
        "still needs. Fix the topic with: kafka-configs --bootstrap-server <brokers> --alter "
        f"--entity-type topics --entity-name {spec.name} --add-config {wanted}"
    )
    raise role.error(msg)


def topic_config(
    admin: Any, topic: str, role: TopicRole, timeout_s: float = ADMIN_TIMEOUT_S
) -> dict[str, str]:
    """The effective configuration of `topic` (its own settings over the brokers' defaults)."""
    try:
        entries = topic_configs(admin, [topic], timeout_s)[topic]
    except KafkaException as exc:
        msg = (
            f"cannot describe the configuration of {role.kind} {topic!r}: {exc.args[0].str()}; "
            "expected DescribeConfigs on it. Check the ACLs of this principal."
        )
        raise role.error(msg) from exc
    return {name: entry.value for name, entry in entries.items()}


def wait_for_leaders(
    client: Any,
    topic: str,
    partitions: int,
    role: TopicRole,
    timeout_s: float = ADMIN_TIMEOUT_S,
    *,
    in_sync: int = 0,
) -> None:
    """Block until `topic` has `partitions` partitions, each with a leader in the metadata and
    at least `in_sync` replicas in sync."""
    deadline = time.monotonic() + timeout_s
    while True:
        state = describe_topic(client, topic, timeout_s)
        if len(state.leaders) >= partitions and min(state.leaders, default=0) >= 0:
            if min(state.in_sync, default=in_sync) >= in_sync:
                return
        if time.monotonic() > deadline:
            msg = (
                f"{role.kind} {topic!r} still lacks partitions, leaders or in-sync replicas after "
                f"{timeout_s:.0f} s (leaders {state.leaders}, in sync {state.in_sync}; expected "
                f"{partitions} partitions, {in_sync} in sync each); expected the brokers of its "
                "replicas to be up. Check the brokers."
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
