"""Cluster ids for the local Kafka cluster must survive the storage tool's argument parser."""

from __future__ import annotations

import base64
import uuid
from collections.abc import Iterator

import pytest

from service.dev import kafka_cluster

# A first byte of 0xF8 puts 0b111110 (index 62, "-" in URL-safe base64) in the first character.
_DASH_FIRST = uuid.UUID(bytes=b"\xf8" + bytes(15))
_PLAIN = uuid.UUID(bytes=b"\x10" + bytes(15))


def test_an_id_starting_with_a_dash_is_drawn_again(monkeypatch: pytest.MonkeyPatch) -> None:
    draws: Iterator[uuid.UUID] = iter([_DASH_FIRST, _DASH_FIRST, _PLAIN])
    monkeypatch.setattr(kafka_cluster.uuid, "uuid4", lambda: next(draws))

    cluster_id = kafka_cluster.new_cluster_id()

    assert cluster_id == base64.urlsafe_b64encode(_PLAIN.bytes).rstrip(b"=").decode()
    assert next(draws, None) is None  # both dash-first ids were drawn and refused


def test_ids_are_kafka_uuid_text() -> None:
    for _ in range(500):
        cluster_id = kafka_cluster.new_cluster_id()
        assert len(cluster_id) == 22 and not cluster_id.startswith("-")
        assert len(base64.urlsafe_b64decode(cluster_id + "==")) == 16
