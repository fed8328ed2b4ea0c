"""Committing a Kafka transaction whose commit may time out (docs/architecture.md, "Faults").

confluent-kafka (librdkafka) does not implement KIP-890's transaction hardening. After a commit
that timed out, its EndTxn and the transaction's last produce requests may still be on their
way, and a producer that went on under the same epoch (aborting, or beginning the next
transaction) could see a late record of the old transaction land in the new one. So a
timed-out commit is fatal for the producer that made it:

1. `commit_transaction` raises `CommitTimedOut` instead of librdkafka's retriable timeout, so no
   caller retries or aborts with that producer;
2. the caller closes it without flushing (`discard`) and writes nothing more with it;
3. before any further write, the caller makes a fresh producer with the same transactional.id
   (`reinitialised`): its ``init_transactions()`` takes a new epoch, so the coordinator settles
   the old transaction (committed if its EndTxn had arrived, else aborted) and rejects every
   request of the old epoch still in flight. The outcome of the timed-out commit is then read
   back where the caller keeps it (a sink's marker, the ingest endpoint's keys topic).

Every ``commit_transaction`` of the project goes through `commit_transaction` here.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable
from typing import Any

from confluent_kafka import KafkaError, KafkaException

from service.errors import DStreamsError

log = logging.getLogger(__name__)

# The client's own API timeout and the broker's request timeout: the outcome is unknown.
TIMEOUT_CODES = frozenset({KafkaError._TIMED_OUT, KafkaError.REQUEST_TIMED_OUT})  # noqa: SLF001


class CommitTimedOut(DStreamsError):
    """A transaction's commit timed out: its outcome is unknown and its producer is finished."""

    def __init__(self, what: str, error: KafkaError) -> None:
        super().__init__(
            f"{what}: the transaction's commit timed out ({error.name()}: {error.str()}); its "
            "outcome is unknown, so the producer is not used again (a new one with the same "
            "transactional.id settles the transaction)"
        )
        self.error = error


def commit_transaction(producer: Any, timeout_s: float, what: str) -> None:
    """`producer.commit_transaction(timeout_s)`; `CommitTimedOut` when it timed out. Other
    failures raise librdkafka's `KafkaException` as they are. `what` names the transaction."""
    try:
        producer.commit_transaction(timeout_s)
    except KafkaException as exc:
        error = exc.args[0]
        if isinstance(error, KafkaError) and error.code() in TIMEOUT_CODES:
            raise CommitTimedOut(what, error) from exc
        raise


def discard(producer: Any) -> None:
    """Close a producer whose commit timed out without sending anything more: queued records
    are purged, and closing does not flush."""
    try:
        with warnings.catch_warnings(record=True):
            producer.purge()
            producer.close()
    except (KafkaException, RuntimeError) as exc:
        log.debug("closing a timed-out producer failed: %s", exc)


def reinitialised(make: Callable[[], Any], timeout_s: float) -> Any:
    """A fresh producer from `make()` (same transactional.id) after ``init_transactions``: a
    new epoch, which settles the old transaction and fences the old producer's requests."""
    producer = make()
    try:
        producer.init_transactions(timeout_s)
    except BaseException:
        discard(producer)
        raise
    return producer
