"""The in-memory ledger of idempotency keys and the keys topic's record format."""

from __future__ import annotations

import pytest

from service.ingest.keys import KeyEntry, KeyLedger, default_keys_topic, topic_config


class Clock:
    def __init__(self) -> None:
        self.ms = 1_000_000

    def __call__(self) -> int:
        return self.ms


def entry(at_ms: int, records: int = 1) -> KeyEntry:
    return KeyEntry("lines", "f" * 32, records, at_ms)


def test_a_key_is_remembered_until_its_retention_has_passed() -> None:
    clock = Clock()
    ledger = KeyLedger(retention_ms=60_000, clock=clock)
    ledger.add("a", entry(clock.ms))
    clock.ms += 59_999
    assert ledger.get("a") == entry(1_000_000)
    clock.ms += 1
    assert ledger.get("a") is None
    assert len(ledger) == 0


def test_expired_keys_leave_oldest_first_and_newer_ones_stay() -> None:
    clock = Clock()
    ledger = KeyLedger(retention_ms=10_000, clock=clock)
    for i in range(5):
        ledger.add(f"k{i}", entry(clock.ms))
        clock.ms += 3_000
    # now = start + 15 s: k0 (0 s) and k1 (3 s) are past 10 s, k2 (6 s) is not.
    assert ledger.get("k2") is not None
    assert ledger.get("k0") is None and ledger.get("k1") is None
    assert len(ledger) == 3


def test_keys_read_back_after_their_retention_are_not_remembered() -> None:
    clock = Clock()
    ledger = KeyLedger(retention_ms=10_000, clock=clock)
    ledger.add("old", entry(clock.ms - 10_000))
    ledger.add("recent", entry(clock.ms - 9_000))
    assert ledger.get("old") is None and ledger.get("recent") is not None


def test_entries_round_trip_and_refuse_other_versions() -> None:
    original = KeyEntry("lines", "0123", 250, 1_700_000_000_000)
    assert KeyEntry.decode(original.encode()) == original
    with pytest.raises(ValueError, match="version"):
        KeyEntry.decode(b'{"v": 99, "source": "s"}')


def test_keys_topic_is_compacted_and_expires_keys() -> None:
    config = topic_config(86_400_000)
    assert config["cleanup.policy"] == "compact,delete"
    assert config["retention.ms"] == "86400000"
    assert int(config["segment.ms"]) <= 86_400_000
    assert default_keys_topic("orders") == "dstreams.ingest-keys.orders"


def test_a_bounded_ledger_is_full_and_says_when_the_oldest_expires() -> None:
    clock = Clock()
    ledger = KeyLedger(retention_ms=10_000, max_keys=2, clock=clock)
    ledger.add("a", entry(clock.ms))
    assert not ledger.full() and ledger.full(pending=1)
    clock.ms += 2_500
    ledger.add("b", entry(clock.ms))
    assert ledger.full()
    assert ledger.seconds_until_room() == 8  # "a" expires 7.5 s from now: rounded up
    assert ledger.get("a") is not None  # full, yet nothing forgotten
    clock.ms += 7_500
    assert not ledger.full() and ledger.get("a") is None


def test_keys_topic_stamps_records_with_the_brokers_clock() -> None:
    assert topic_config(60_000)["message.timestamp.type"] == "LogAppendTime"
