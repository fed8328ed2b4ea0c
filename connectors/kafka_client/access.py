"""Can this client reach the cluster, prove who it is, and do what it must? Asked once, up front.

A client with a wrong password, an untrusted certificate or a missing ACL does not fail in
librdkafka: it retries, logs, and waits. A service must instead stop at start-up with one message
naming what is wrong and what to fix (docs/architecture.md, "Clear failures"). `check_access`:

1. connects with an admin client whose errors are collected (librdkafka's own log lines are
   silenced) and turns an authentication or TLS failure into `KafkaAuthenticationError` or
   `KafkaTlsError`;
2. describes the topics, groups and cluster the caller needs, with the operations the broker
   authorizes for this principal, and a transactional producer per transactional-id prefix, and
   turns each missing permission into `KafkaAuthorizationError` naming the ACL to add.

Topics the caller will create and that do not exist yet are checked with a validate-only
creation, which the broker authorizes like a real one and then discards.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from confluent_kafka import KafkaError, KafkaException

from connectors.kafka_client.factory import new_admin_client, new_producer
from service.errors import DStreamsError

# Each step is one request; a reachable cluster answers well within this.
STEP_TIMEOUT_S = 15.0
# How long to wait for the first metadata answer before leaving the verdict to the service's own
# clients (a cluster that is down is not an access problem).
CONNECT_TIMEOUT_S = 20.0
log = logging.getLogger(__name__)
_SILENT = logging.getLogger("dstreams.kafka.access")
_SILENT.addHandler(logging.NullHandler())
_SILENT.propagate = False


class KafkaAccessError(DStreamsError):
    """The service cannot use the Kafka cluster as configured: credentials, TLS or ACLs."""


class KafkaAuthenticationError(KafkaAccessError):
    """The brokers refused the client's credentials (SASL password, user or mechanism)."""


class KafkaTlsError(KafkaAccessError):
    """The TLS handshake failed: an untrusted certificate, a host-name mismatch, a bad key."""


class KafkaAuthorizationError(KafkaAccessError):
    """The principal lacks an ACL the service needs."""


@dataclass(frozen=True)
class Need:
    """One permission the caller needs: `operation` on a resource, and why."""

    resource: str  # "topic", "group", "transactional-id" (a prefix) or "cluster"
    name: str
    operation: str  # an AclOperation name: READ, WRITE, DESCRIBE, CREATE
    why: str
    creates: bool = False
    """A topic the caller creates when it is missing."""


def principal_of(conf: Mapping[str, Any]) -> str:
    """The principal the brokers will see, as well as the client can tell: `User:<name>`.

    >>> principal_of({"security.protocol": "SASL_SSL", "sasl.username": "dstreams"})
    'User:dstreams'
    >>> principal_of({"security.protocol": "PLAINTEXT"})
    'User:ANONYMOUS'
    """
    username = conf.get("sasl.username")
    if username:
        return f"User:{username}"
    if conf.get("ssl.certificate.location"):
        return f"User:{_certificate_name(str(conf['ssl.certificate.location']))}"
    return "User:ANONYMOUS"


def _certificate_name(path: str) -> str:
    """The CN of a client certificate (the principal under the usual mapping rule), else its
    whole subject; the file's name if it cannot be read."""
    import ssl

    # The standard library's own PEM certificate reader (what its test suite uses): private,
    # and absent from typeshed, but it saves a dependency on a crypto package.
    reader = ssl._ssl._test_decode_cert  # type: ignore[attr-defined]  # noqa: SLF001 - see above
    try:
        decoded = reader(path)
    except (OSError, ssl.SSLError):
        return f"<the subject of {path}>"
    subject = [dict(rdn) for rdn in decoded.get("subject", ())]
    names = [rdn["commonName"] for rdn in subject if "commonName" in rdn]
    return str(names[0]) if names else f"<the subject of {path}>"


def is_secured(conf: Mapping[str, Any]) -> bool:
    """Whether the client authenticates or encrypts (the only clusters with ACLs in practice).

    >>> is_secured({"bootstrap.servers": "b:9092"}), is_secured({"security.protocol": "SSL"})
    (False, True)
    """
    return str(conf.get("security.protocol", "plaintext")).lower() != "plaintext"


def silent_admin(conf: Mapping[str, Any], errors: list[KafkaError] | None = None) -> Any:
    """An AdminClient that logs nothing itself; its errors go to `errors` when given."""
    collect = errors.append if errors is not None else (lambda _error: None)
    settings = {"error_cb": collect, "log.connection.close": False}
    return new_admin_client(conf, settings=settings, log=_SILENT)


def check_credentials(conf: Mapping[str, Any]) -> bool:
    """Raise `KafkaAuthenticationError` or `KafkaTlsError` when the brokers refuse this client.

    Call it before any other client is made: librdkafka logs every refused attempt of every
    client to stderr. False: no broker answered in time (not a refusal; others report it)."""
    errors: list[KafkaError] = []
    return _connect(silent_admin(conf, errors), conf, errors)


def check_permissions(conf: Mapping[str, Any], needs: Iterable[Need]) -> None:
    """Raise `KafkaAuthorizationError` for the first of `needs` the principal lacks."""
    admin = silent_admin(conf)
    needs = list(needs)
    principal = principal_of(conf)
    # Transactional ids first: while one is refused, librdkafka 2.x can report that refusal
    # for a group's coordinator lookup too, which would name the wrong ACL.
    for need in needs:
        if need.resource == "transactional-id":
            _check_transactional_prefix(conf, need, principal)
    for need in needs:
        if need.resource == "topic":
            _check_topic(admin, need, principal)
        elif need.resource == "group":
            _check_group(admin, need, principal)
        elif need.resource == "cluster":
            _check_cluster(admin, need, principal)


def check_access(conf: Mapping[str, Any], needs: Iterable[Need]) -> None:
    """`check_credentials`, then (if a broker answered) `check_permissions`."""
    if check_credentials(conf):
        check_permissions(conf, needs)


# --- connecting -------------------------------------------------------------------------------


def _connect(admin: Any, conf: Mapping[str, Any], errors: list[KafkaError]) -> bool:
    deadline = time.monotonic() + CONNECT_TIMEOUT_S
    while time.monotonic() < deadline:
        try:
            admin.list_topics(timeout=2)
        except KafkaException:
            pass
        else:
            return True
        admin.poll(0.1)  # serves error_cb
        for error in errors:
            _raise_if_refused(error, conf)
    return False


def _raise_if_refused(error: KafkaError, conf: Mapping[str, Any]) -> None:
    code, text = error.code(), error.str()
    lowered = text.lower()
    if code == KafkaError._AUTHENTICATION or "sasl authentication" in lowered:  # noqa: SLF001
        raise KafkaAuthenticationError(_authentication_message(conf, text))
    if code == KafkaError._SSL or "ssl handshake" in lowered or "certificate" in lowered:  # noqa: SLF001
        raise KafkaTlsError(_tls_message(conf, text))


def _authentication_message(conf: Mapping[str, Any], text: str) -> str:
    mechanism = conf.get("sasl.mechanism", conf.get("sasl.mechanisms", "GSSAPI"))
    return (
        f"the Kafka brokers at {conf.get('bootstrap.servers')} refused to authenticate user "
        f"{conf.get('sasl.username')!r} with {mechanism}: {_without_prefix(text)}. Check "
        "kafka.properties.sasl.username and kafka.sasl_password (and that the user exists "
        f"for {mechanism} on the cluster)"
    )


def _tls_message(conf: Mapping[str, Any], text: str) -> str:
    ca = conf.get("ssl.ca.location", "the system's trust store")
    return (
        f"the TLS handshake with the Kafka brokers at {conf.get('bootstrap.servers')} failed: "
        f"{_without_prefix(text)}. Check that kafka.properties.ssl.ca.location ({ca}) holds the "
        "CA that signed the brokers' certificates, that the brokers' certificates name the host "
        "in bootstrap_servers, and (mutual TLS) that ssl.certificate.location, "
        "ssl.key.location and kafka.ssl_key_password belong together"
    )


def _without_prefix(text: str) -> str:
    # librdkafka prefixes the broker's address and thread; the address is in the message already.
    return text.split(": ", 1)[1] if text.startswith(("sasl_ssl://", "ssl://")) else text


# --- authorization ----------------------------------------------------------------------------


def _operation_names(operations: Iterable[Any] | None) -> set[str]:
    return {op.name for op in operations or ()}


def _check_topic(admin: Any, need: Need, principal: str) -> None:
    from confluent_kafka import TopicCollection

    futures = admin.describe_topics(
        TopicCollection([need.name]),
        include_authorized_operations=True,
        request_timeout=STEP_TIMEOUT_S,
    )
    try:
        description = futures[need.name].result(timeout=STEP_TIMEOUT_S)
    except KafkaException as exc:
        code = exc.args[0].code()
        if code == KafkaError.TOPIC_AUTHORIZATION_FAILED:
            # The broker hides a topic the principal may not describe; READ and WRITE both
            # imply DESCRIBE, so the operation needed is the one to grant.
            _refuse(need, principal, need.operation)
        if code == KafkaError.UNKNOWN_TOPIC_OR_PART and need.creates:
            _check_create(admin, need, principal)
            return
        _undecided(need, exc)
        return
    allowed = _operation_names(description.authorized_operations)
    if need.operation not in allowed and "ALL" not in allowed:
        _refuse(need, principal, need.operation)


def _check_cluster(admin: Any, need: Need, principal: str) -> None:
    # DescribeCluster reports no authorized operations to a principal without DESCRIBE on the
    # cluster, so the one cluster permission the service needs (DESCRIBE_CONFIGS) is asked for
    # by doing what the service does with it: describing one broker's configuration.
    from confluent_kafka.admin import ConfigResource, ResourceType

    try:
        broker = min(admin.list_topics(timeout=STEP_TIMEOUT_S).brokers)
        resource = ConfigResource(ResourceType.BROKER, str(broker))
        future = admin.describe_configs([resource], request_timeout=STEP_TIMEOUT_S)[resource]
        future.result(timeout=STEP_TIMEOUT_S)
    except KafkaException as exc:
        if exc.args[0].code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED:
            _refuse(need, principal, need.operation)
        _undecided(need, exc)


def _check_create(admin: Any, need: Need, principal: str) -> None:
    from confluent_kafka.admin import NewTopic

    futures = admin.create_topics(
        [NewTopic(need.name, num_partitions=1)],
        validate_only=True,
        request_timeout=STEP_TIMEOUT_S,
    )
    try:
        futures[need.name].result(timeout=STEP_TIMEOUT_S)
    except KafkaException as exc:
        if exc.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED:
            _refuse_create(need, principal)
        # Anything else (e.g. a replication factor the cluster cannot meet) is reported by
        # the creation itself, with the settings that fix it.


def _check_group(admin: Any, need: Need, principal: str) -> None:
    futures = admin.describe_consumer_groups(
        [need.name], include_authorized_operations=True, request_timeout=STEP_TIMEOUT_S
    )
    try:
        description = futures[need.name].result(timeout=STEP_TIMEOUT_S)
    except KafkaException as exc:
        if exc.args[0].code() == KafkaError.GROUP_AUTHORIZATION_FAILED:
            _refuse(need, principal, need.operation)
        _undecided(need, exc)
        return
    allowed = _operation_names(description.authorized_operations)
    if allowed and need.operation not in allowed and "ALL" not in allowed:
        _refuse(need, principal, need.operation)


def _check_transactional_prefix(conf: Mapping[str, Any], need: Need, principal: str) -> None:
    """A transactional producer on an id under the prefix that no real producer uses, so no
    producer of the service (or of another driver) is fenced by the check."""
    probe_id = f"{need.name}access-check"
    probe = {**conf, "transactional.id": probe_id, "error_cb": lambda _error: None}
    producer = new_producer(probe, log=_SILENT)
    try:
        producer.init_transactions(STEP_TIMEOUT_S)
    except KafkaException as exc:
        code = exc.args[0].code()
        if code == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED:
            _refuse(need, principal, need.operation)
        if code == KafkaError.CLUSTER_AUTHORIZATION_FAILED:
            msg = (
                f"the Kafka cluster refused {principal} IDEMPOTENT_WRITE on the cluster, which "
                f"transactional producers need for {need.why}; add it with: kafka-acls "
                f"--add --allow-principal {principal} --operation IdempotentWrite --cluster"
            )
            raise KafkaAuthorizationError(msg) from None
        _undecided(need, exc)
    # No flush: the producer never sends, and flushing a failed one re-raises its fatal error.


def _undecided(need: Need, exc: KafkaException) -> None:
    # Not a refusal (e.g. the cluster is busy): the service's own clients report it if it stays.
    log.info("could not check %s on %s %r: %s", need.operation, need.resource, need.name, exc)


def _refuse(need: Need, principal: str, operation: str) -> None:
    resource = {
        "topic": f"--topic {need.name}",
        "group": f"--group {need.name}",
        "transactional-id": f"--transactional-id {need.name} --resource-pattern-type prefixed",
        "cluster": "--cluster",
    }[need.resource]
    pretty = "".join(word.title() for word in operation.split("_"))
    msg = (
        f"the Kafka cluster does not allow {principal} to {operation} {need.resource} "
        f"{need.name!r}, which the service needs for {need.why}. Add the ACL with: kafka-acls "
        f"--add --allow-principal {principal} --operation {pretty} {resource} "
        "(README, Running against a secured cluster)"
    )
    raise KafkaAuthorizationError(msg)


def _refuse_create(need: Need, principal: str) -> None:
    msg = (
        f"topic {need.name!r} ({need.why}) does not exist and the Kafka cluster does not allow "
        f"{principal} to CREATE topics; create it first, or add the ACL with: kafka-acls --add "
        f"--allow-principal {principal} --operation Create --topic {need.name} "
        "(README, Running against a secured cluster)"
    )
    raise KafkaAuthorizationError(msg)
