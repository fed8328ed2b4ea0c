"""The transactional-id prefixes the ACL tables grant are the app's alone: each ends with a
separator that no app id holds, so app `orders`'s prefixed ACLs cannot reach app `orders-eu`'s
journal or Kafka-output producers (and the other way round)."""

from __future__ import annotations

import itertools

import pytest

from service.journal.kafka import transactional_id, transactional_id_prefix
from sinks.kafka import KafkaSink

APPS = ("orders", "orders-eu", "orders_eu", "o")


def _ids_and_prefixes(app: str) -> list[tuple[str, str]]:
    """(an id the app's producers use, the ACL prefix granted for it), journal and sink."""
    return [
        (transactional_id(app), transactional_id_prefix(app)),
        (KafkaSink.transactional_id(app, "counts", 3), KafkaSink.transactional_id_prefix(app)),
    ]


@pytest.mark.parametrize("app", APPS)
def test_each_id_starts_with_the_prefix_its_acl_grants(app: str) -> None:
    for used, prefix in _ids_and_prefixes(app):
        assert used.startswith(prefix)
        assert prefix.endswith(".")


@pytest.mark.parametrize(("app", "other"), list(itertools.permutations(APPS, 2)))
def test_no_prefix_of_one_app_matches_an_id_of_another(app: str, other: str) -> None:
    prefixes = [prefix for _, prefix in _ids_and_prefixes(app)]
    for used, _ in _ids_and_prefixes(other):
        assert not any(used.startswith(prefix) for prefix in prefixes), (used, prefixes)


def test_the_journal_and_the_kafka_outputs_never_share_an_id() -> None:
    journal_prefixes = [transactional_id_prefix(app) for app in APPS]
    for app in APPS:
        # An output named like the journal's own id still lands under the sink's prefix.
        sink_id = KafkaSink.transactional_id(app, "journal", 0)
        assert not any(sink_id.startswith(prefix) for prefix in journal_prefixes)
