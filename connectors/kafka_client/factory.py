"""The one place that makes confluent-kafka clients: consumers, producers and admin clients.

Every client's configuration is three layers, each overriding the one before:

1. the role's `defaults`, which the connection settings may override (a reader's fetch tuning);
2. the connection settings, `conf`: ``bootstrap.servers`` and the security properties, as
   ``KafkaSettings.librdkafka_config()`` reveals them; merged here and nowhere else, and never
   named by the role's layers (`ValueError`);
3. the role's `settings`, then what the role itself requires (a transactional producer's id,
   idempotence and ``acks=all``), which nothing overrides.

Every client logs through Python logging (`CLIENT_LOG` unless the caller names another logger),
so librdkafka's lines come out in the process's format (JSON lines in the service) instead of in
librdkafka's own on stderr. librdkafka hands them over when the client is polled.

The `*_config` functions return a configuration without the logger: it is what process caches key
their clients by (a logger's ``repr`` shows its level, which can change) and what tests compare.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, TypedDict, Unpack

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient

ClientConf = Mapping[str, Any]
"""librdkafka properties: ``bootstrap.servers``, ``security.protocol``, ``sasl.*``, ``ssl.*``."""

CLIENT_LOG = logging.getLogger("connectors.kafka_client.librdkafka")
"""Where librdkafka's own log lines go."""

JAVA_PLACEMENT: ClientConf = MappingProxyType({"partitioner": "murmur2_random"})
"""Producer defaults that put keyed records where the Java client would, the same on replays."""

# Properties only the connection settings may give: a role that set them would send its client
# to another cluster, or as another principal, than every other client of the process.
_CONNECTION_PREFIXES = ("bootstrap.servers", "security.", "sasl.", "ssl.")

# What makes a producer transactional and its commits durable; no caller may weaken it.
_TRANSACTIONAL: ClientConf = MappingProxyType({"enable.idempotence": True, "acks": "all"})
_NOTHING: ClientConf = MappingProxyType({})


class RoleLayers(TypedDict, total=False):
    """A role's two layers around the connection settings, as the `*_config` functions take
    them; a client function passes them on unchanged."""

    defaults: ClientConf
    settings: ClientConf


# --- configurations ---------------------------------------------------------------------------


def consumer_config(
    conf: ClientConf, *, defaults: ClientConf = _NOTHING, settings: ClientConf = _NOTHING
) -> dict[str, Any]:
    """A consumer's configuration: `defaults`, then `conf`, then `settings`."""
    return {**_role(defaults), **conf, **_role(settings)}


def transactional_producer_config(
    conf: ClientConf,
    transactional_id: str,
    transaction_timeout_ms: int,
    *,
    defaults: ClientConf = _NOTHING,
    settings: ClientConf = _NOTHING,
) -> dict[str, Any]:
    """A transactional producer's configuration: `defaults`, `conf`, `settings`, then the id,
    idempotence, ``acks=all`` and the transaction timeout, which neither may change."""
    return {
        **_role(defaults),
        **conf,
        **_role(settings),
        **_TRANSACTIONAL,
        "transactional.id": transactional_id,
        "transaction.timeout.ms": transaction_timeout_ms,
    }


def idempotent_producer_config(
    conf: ClientConf, *, settings: ClientConf = _NOTHING
) -> dict[str, Any]:
    """A producer that writes each record once per send, in order: `conf`, `settings`, then
    ``enable.idempotence``."""
    return {**conf, **_role(settings), "enable.idempotence": True}


def admin_config(conf: ClientConf, *, settings: ClientConf = _NOTHING) -> dict[str, Any]:
    """An admin client's configuration: `conf`, then `settings`."""
    return {**conf, **_role(settings)}


def logging_to(config: ClientConf, log: logging.Logger) -> dict[str, Any]:
    """`config` with librdkafka's log lines sent to `log`."""
    return {**config, "logger": log}


def _role(layer: ClientConf) -> ClientConf:
    """`layer`, checked to leave the brokers and the security settings to `conf`."""
    named = sorted(key for key in layer if key.startswith(_CONNECTION_PREFIXES))
    if named:
        msg = (
            f"a client's role settings name {', '.join(named)}; expected the brokers and the "
            "security settings to come only from the connection settings (kafka.*), so that "
            "every client of the process reaches the same cluster as the same principal"
        )
        raise ValueError(msg)
    return layer


# --- clients ----------------------------------------------------------------------------------


def new_consumer(
    conf: ClientConf, *, log: logging.Logger = CLIENT_LOG, **layers: Unpack[RoleLayers]
) -> Consumer:
    """A consumer of `consumer_config(conf, defaults=..., settings=...)`."""
    return Consumer(logging_to(consumer_config(conf, **layers), log))


def new_transactional_producer(
    conf: ClientConf,
    transactional_id: str,
    transaction_timeout_ms: int,
    *,
    log: logging.Logger = CLIENT_LOG,
    **layers: Unpack[RoleLayers],
) -> Producer:
    """A producer of `transactional_producer_config(...)`; `init_transactions()` is the
    caller's, since only the caller knows what its failure means."""
    config = transactional_producer_config(conf, transactional_id, transaction_timeout_ms, **layers)
    return new_producer(config, log)


def new_idempotent_producer(
    conf: ClientConf, *, settings: ClientConf = _NOTHING, log: logging.Logger = CLIENT_LOG
) -> Producer:
    """A producer of `idempotent_producer_config(conf, settings=...)`."""
    return new_producer(idempotent_producer_config(conf, settings=settings), log)


def new_producer(config: ClientConf, log: logging.Logger = CLIENT_LOG) -> Producer:
    """A producer of a configuration that a `*_producer_config` function made, for a caller that
    keeps the configuration (a process cache keys its producers by it)."""
    return Producer(logging_to(config, log))


def new_admin_client(
    conf: ClientConf, *, settings: ClientConf = _NOTHING, log: logging.Logger = CLIENT_LOG
) -> AdminClient:
    """An admin client of `admin_config(conf, settings=...)`."""
    return AdminClient(logging_to(admin_config(conf, settings=settings), log))
