"""A timed-out transaction commit is fatal for its producer (`connectors.kafka_client.
transactions`): the helper says so with `CommitTimedOut`, and it is the only place that calls
`commit_transaction`. The real broker paused mid-commit is tests/kafka/test_commit_timeout.py."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from connectors.kafka_client import CommitTimedOut, commit_transaction, reinitialised

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
HELPER = ROOT / "connectors" / "kafka_client" / "transactions.py"


class FakeProducer:
    def __init__(self, error_code: int | None = None) -> None:
        self.error_code = error_code
        self.calls: list[str] = []

    def commit_transaction(self, timeout_s: float) -> None:
        self.calls.append("commit")
        if self.error_code is not None:
            raise KafkaException(KafkaError(self.error_code))

    def init_transactions(self, timeout_s: float) -> None:
        self.calls.append("init")
        if self.error_code is not None:
            raise KafkaException(KafkaError(self.error_code))

    def purge(self) -> None:
        self.calls.append("purge")

    def close(self) -> None:
        self.calls.append("close")


@pytest.mark.parametrize("code", [KafkaError._TIMED_OUT, KafkaError.REQUEST_TIMED_OUT])  # noqa: SLF001
def test_a_timed_out_commit_is_commit_timed_out(code: int) -> None:
    with pytest.raises(CommitTimedOut, match="journal topic j: the transaction's commit timed"):
        commit_transaction(FakeProducer(code), 1.0, "journal topic j")


def test_other_commit_failures_are_kafkas_own() -> None:
    with pytest.raises(KafkaException):
        commit_transaction(FakeProducer(KafkaError._FENCED), 1.0, "x")  # noqa: SLF001
    commit_transaction(FakeProducer(), 1.0, "x")  # a commit that succeeds raises nothing


def test_a_reinitialised_producer_has_run_init_transactions() -> None:
    assert reinitialised(FakeProducer, 5.0).calls == ["init"]


def test_a_producer_whose_init_fails_is_discarded() -> None:
    made: list[Any] = []

    def make() -> FakeProducer:
        made.append(FakeProducer(KafkaError._TRANSPORT))  # noqa: SLF001
        return made[-1]

    with pytest.raises(KafkaException):
        reinitialised(make, 5.0)
    assert made[0].calls == ["init", "purge", "close"]


def test_every_commit_transaction_goes_through_the_helper() -> None:
    call = re.compile(r"\.commit_transaction\(")
    callers = [
        str(path.relative_to(ROOT))
        for package in ("service", "connectors", "sinks")
        for path in (ROOT / package).rglob("*.py")
        if path != HELPER and call.search(path.read_text())
    ]
    assert callers == [], "call connectors.kafka_client.commit_transaction instead"
