"""Live queries of a keyed state on disk: read from its partitions' local stores as of the last
completed batch, without a Spark job (docs/architecture.md, "Live state queries").

A store may already hold a later batch than the one completed (the next batch's task may have
committed): it keeps the values its last batches replaced (`disk_store.UNDO_BATCHES`), and a
query reads through them back to the completed batch. A store that cannot say (it is behind,
was rebuilt, or moved past what it keeps) gets the query answered 503, to retry.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

from service.graph.base import StoredState
from service.graph.disk_task import text_of, value_of
from service.graph.query_jobs import Deadline, QueryUnavailable, key_partition

_ABOVE_EVERY_CHARACTER = "\U0010ffff"


def find_on_disk(
    sc: Any, state: StoredState, key: Hashable, version: int | None, deadline: Deadline
) -> tuple[bool, Any]:
    """(found, value) of `key` as of batch `version` (None: the state had no batch yet)."""
    if version is None:
        return (False, None)
    partition = key_partition(sc, key, state.partitions, deadline)
    with _store(state, partition, version) as store:
        stored = store.as_of(text_of(key), version)
    return (False, None) if stored is None else (True, value_of(stored[0]))


def scan_on_disk(
    state: StoredState, prefix: str, limit: int, version: int | None
) -> list[tuple[str, Any]]:
    """Up to `limit` string keys starting with `prefix`, partition by partition, as of batch
    `version`."""
    if version is None:
        return []
    low = text_of(prefix)[:-1]  # the key's JSON text without its closing quote
    entries: list[tuple[str, Any]] = []
    for partition in range(state.partitions):
        with _store(state, partition, version) as store:
            found = store.range_as_of(
                low, low + _ABOVE_EVERY_CHARACTER, version, limit - len(entries)
            )
        entries += [(value_of(key), value_of(value)) for key, value in found]
        if len(entries) >= limit:
            break
    return entries


def _store(state: StoredState, partition: int, version: int) -> Any:
    store = state.local_store(partition)
    if store is None:
        msg = (
            f"partition {partition} of this state is stored on an executor's disk that the "
            "driver does not see; queries of a state on disk need the local state folder on "
            "the driver's machine (local mode, or a shared volume)"
        )
        raise QueryUnavailable(msg)
    if not store.can_answer(version):
        store.close()
        msg = f"partition {partition} cannot answer as of batch {version} now; try again shortly"
        raise QueryUnavailable(msg)
    return store
