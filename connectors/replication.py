"""Replication of the topics a process depends on: described, compared with a minimum, enforced.

An acknowledged write is only as durable as the topic it lands in: with `acks=all`, a record is
acknowledged once every in-sync replica has it, and `min.insync.replicas` says how few in-sync
replicas the partition may shrink to before writes are refused. A topic with one replica (or a
minimum of one in-sync replica) acknowledges records that the death of a single broker loses.

`enforce` describes every topic a process reads or writes (replication factor from the metadata,
the effective `min.insync.replicas` from the topic's configuration), and for a topic that does not
exist yet looks at what the process would create it with. Each shortfall is then either a refusal
(`ReplicationInsufficient`, naming the topic and the command that fixes it) or a warning, and is
reported through a callback so the caller can keep a metric of it.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from connectors.kafka_client.admin import TopicState, broker_setting, describe_topics, topic_configs
from service.errors import ReplicationInsufficient

log = logging.getLogger(__name__)

# Describing topics is one metadata and one DescribeConfigs request; a cluster slower than this
# to answer them at start-up is unavailable.
DESCRIBE_TIMEOUT_S = 30.0
MIN_INSYNC = "min.insync.replicas"

# Called once per checked topic: (topic, role, below the minimum).
Report = Callable[[str, str, bool], None]


@dataclass(frozen=True)
class Replication:
    """How a topic is, or would be, replicated; as a requirement, the least of each that is
    enough (kafka.min_replication_factor, kafka.min_insync_replicas)."""

    factor: int
    """Replicas of the least replicated partition."""
    min_insync: int
    """The effective min.insync.replicas (the topic's own, else the broker's default)."""

    def meets(self, requirement: Replication) -> bool:
        return self.factor >= requirement.factor and self.min_insync >= requirement.min_insync


@dataclass(frozen=True)
class TopicUse:
    """A topic a process depends on, and what the process would create it with if missing."""

    topic: str
    role: str
    """What the topic is to the process: input, output, markers, dead-letters, journal,
    ingest-keys (a metric label)."""
    owner: str = ""
    """Whose topic it is, e.g. "source lines" or "sink counts"; shown in messages."""
    creates_with: int | None = None
    """Replication factor the process creates the topic with; None: it never creates it."""
    creates_min_insync: int | None = None
    """min.insync.replicas the process sets on creation; None: the broker's default."""
    setting: str | None = None
    """The configuration key of `creates_with`, named in messages, e.g. sinks.counts."""


@dataclass(frozen=True)
class Shortfall:
    """A topic below the requirement: `found` is how it is (or, when it does not exist, how the
    process would create it); `message` says what is short and how to fix it."""

    use: TopicUse
    found: Replication
    exists: bool
    message: str


# --- describing -------------------------------------------------------------------------------


def describe(
    admin: Any, topics: Iterable[str], timeout_s: float = DESCRIBE_TIMEOUT_S
) -> dict[str, Replication]:
    """The replication of each of `topics` that exists; missing topics are left out."""
    states = describe_topics(admin, set(topics), timeout_s)
    present = sorted(t for t, state in states.items() if state.exists)
    factors = {t: _least_replicas(t, states[t]) for t in present}
    if not present:
        return {}
    configs = topic_configs(admin, present, timeout_s)
    return {t: Replication(factors[t], int(configs[t][MIN_INSYNC].value)) for t in present}


def _least_replicas(topic: str, state: TopicState) -> int:
    if state.error is not None and not state.error.retriable():
        msg = (
            f"cannot describe topic {topic!r}: {state.error.str()}; expected this client to "
            "be allowed to describe it. Check the ACLs of its principal."
        )
        raise ReplicationInsufficient(msg)
    return min(state.replicas, default=0)


def broker_min_insync(admin: Any, timeout_s: float = DESCRIBE_TIMEOUT_S) -> int:
    """The `min.insync.replicas` a topic created without one gets: the brokers' lowest."""
    return broker_setting(admin, MIN_INSYNC, timeout_s)


def matching_topics(admin: Any, pattern: str, timeout_s: float = DESCRIBE_TIMEOUT_S) -> list[str]:
    """Existing topics whose whole name matches `pattern`, internal ones left out (as a pattern
    subscription sees them)."""
    compiled = re.compile(pattern)
    names = admin.list_topics(timeout=timeout_s).topics
    return sorted(n for n in names if not n.startswith("__") and compiled.fullmatch(n))


# --- comparing --------------------------------------------------------------------------------


def shortfalls(
    uses: Sequence[TopicUse],
    found: Mapping[str, Replication],
    requirement: Replication,
    broker_default_min_insync: int,
    bootstrap: str,
) -> list[Shortfall]:
    """Every use whose topic is, or would be created, below `requirement`."""
    short = []
    for use in uses:
        exists = use.topic in found
        if exists:
            replication = found[use.topic]
        elif use.creates_with is not None:
            min_insync = use.creates_min_insync or broker_default_min_insync
            replication = Replication(use.creates_with, min_insync)
        else:
            continue  # neither there nor ours to create: whoever reads it reports it missing
        if not replication.meets(requirement):
            message = _explain(use, replication, exists, requirement, bootstrap)
            short.append(Shortfall(use, replication, exists, message))
    return short


def _explain(
    use: TopicUse, found: Replication, exists: bool, wanted: Replication, bootstrap: str
) -> str:
    state = "has" if exists else "does not exist yet and would be created with"
    role = f"{use.role} of {use.owner}" if use.owner else use.role
    head = (
        f"topic {use.topic!r} ({role}) {state} replication factor {found.factor} and "
        f"min.insync.replicas {found.min_insync}; expected at least {wanted.factor} and "
        f"{wanted.min_insync}, so that an acknowledged record survives the loss of a broker"
    )
    fixes = []
    if not exists and use.setting is not None:
        fixes.append(f"set {use.setting}.replication_factor: {wanted.factor}")
        if use.creates_min_insync is not None and found.min_insync < wanted.min_insync:
            fixes.append(f"set {use.setting}.min_insync_replicas: {wanted.min_insync}")
    elif exists and found.factor < wanted.factor:
        fixes.append(
            f"add replicas with kafka-reassign-partitions.sh --bootstrap-server {bootstrap} "
            "--reassignment-json-file plan.json --execute (plan.json listing "
            f"{wanted.factor} brokers for every partition of {use.topic})"
        )
    if found.min_insync < wanted.min_insync and (exists or use.creates_min_insync is None):
        fixes.append(
            f"kafka-configs.sh --bootstrap-server {bootstrap} --alter --entity-type topics "
            f"--entity-name {use.topic} --add-config {MIN_INSYNC}={wanted.min_insync}"
            + ("" if exists else " once it exists")
        )
    return f"{head}. Fix: {'; '.join(fixes)}"


# --- enforcing --------------------------------------------------------------------------------


def enforce(
    admin: Any,
    uses_of: Callable[[Any], Sequence[TopicUse]],
    requirement: Replication,
    *,
    required: bool,
    bootstrap: str,
    report: Report,
) -> list[Shortfall]:
    """Describe the topics `uses_of(admin)` names and refuse (`required`) or warn about each
    shortfall.

    `report(topic, role, under)` is called for every topic checked. With `required`, a cluster
    that cannot be described refuses as well, since replication could not be confirmed.
    """
    try:
        uses = uses_of(admin)
        if not uses:
            return []
        found = describe(admin, [u.topic for u in uses])
        needs_default = any(u.topic not in found and u.creates_with is not None for u in uses)
        default_min_insync = broker_min_insync(admin) if needs_default else 1
    except ReplicationInsufficient:
        raise
    except Exception as error:  # any client failure: the check could not be made
        _unchecked(error, required, bootstrap)
        return []
    short = shortfalls(uses, found, requirement, default_min_insync, bootstrap)
    _report_all(uses, found, short, report)
    _refuse_or_warn(short, required)
    return short


def _unchecked(error: Exception, required: bool, bootstrap: str) -> None:
    """The topics could not be described: a refusal when replication is required."""
    if required:
        msg = (
            f"could not describe the topics' replication ({type(error).__name__}: {error}); "
            f"expected the brokers at {bootstrap} to answer within {DESCRIBE_TIMEOUT_S:.0f}s. "
            "Check the brokers, or set kafka.require_replication: false to start without the check."
        )
        raise ReplicationInsufficient(msg) from error
    log.warning("could not check the topics' replication: %s: %s", type(error).__name__, error)


def _refuse_or_warn(short: list[Shortfall], required: bool) -> None:
    if short and required:
        lines = "\n".join(f"  - {s.message}" for s in short)
        msg = (
            f"{len(short)} topic(s) are replicated less than kafka.require_replication demands:\n"
            f"{lines}\n(kafka.min_replication_factor and kafka.min_insync_replicas set the "
            "minimum.)"
        )
        raise ReplicationInsufficient(msg)
    for shortfall in short:
        log.warning("under-replicated: %s", shortfall.message)


def _report_all(
    uses: Sequence[TopicUse],
    found: Mapping[str, Replication],
    short: Sequence[Shortfall],
    report: Report,
) -> None:
    below = {s.use.topic for s in short}
    for use in uses:
        if use.topic in found or use.creates_with is not None:
            report(use.topic, use.role, use.topic in below)


def unique(uses: Iterable[TopicUse]) -> list[TopicUse]:
    """One use per topic, the first (e.g. one dead-letter topic serves several outputs)."""
    seen: dict[str, TopicUse] = {}
    for use in uses:
        seen.setdefault(use.topic, use)
    return list(seen.values())
