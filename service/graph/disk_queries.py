"""Queries of a keyed state on disk: live, read from its partitions' local stores as of the last
completed batch, without a Spark job (docs/architecture.md, "Live state queries"); offline, read
from the durable files as of a checkpoint (`dstreams checkpoint show --key`).

A store may already hold a later batch than the one completed (the next batch's task may have
committed): it keeps the values its last batches replaced (`disk_store.UNDO_BATCHES`), and a
query reads through them back to the completed batch. A store that cannot say (it is behind,
was rebuilt, or moved past what it keeps) gets the query answered 503, to retry.
"""

from __future__ import annotations

import ast
import tempfile
from collections.abc import Hashable
from pathlib import Path
from typing import Any

from service.errors import DStreamsError
from service.graph.base import StoredState
from service.graph.disk_changelog import Lineage
from service.graph.disk_store import LocalStore
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


def key_texts(wanted: str) -> list[str]:
    """The JSON texts a key typed on a command line may stand for: the string itself, and the
    Python literal it spells (an int, a tuple), if any."""
    texts = [text_of(wanted)]
    try:
        literal = ast.literal_eval(wanted)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return texts
    try:
        texts.append(text_of(literal))
    except DStreamsError:
        pass  # not a type a state holds
    return texts


def find_offline(lineage: Lineage, version: int, texts: list[str]) -> list[tuple[Any, Any]]:
    """Every key of `texts` with a state as of batch `version`, and that state, read from the
    durable files alone (`dstreams checkpoint show --key`): per partition, the changes back from
    `version` until the key appears or a snapshot holds the rest."""
    found: list[tuple[Any, Any]] = []
    for partition in range(lineage.partitions):
        for text, state in _as_of_offline(lineage, partition, version, set(texts)).items():
            if state is not None:
                found.append((value_of(text), value_of(state)))
    return found


def _as_of_offline(
    lineage: Lineage, partition: int, version: int, wanted: set[str]
) -> dict[str, str | None]:
    states: dict[str, str | None] = {}
    at: int | None = version
    while at is not None and wanted - states.keys():
        changes = lineage.read_changes(partition, at)
        if changes is None:
            raise lineage.missing(partition, at)
        for change in changes.rows:
            if change.key in wanted and change.key not in states:
                states[change.key] = change.state
        if lineage.has_snapshot(partition, at):
            states.update(_from_snapshot(lineage, partition, at, wanted - states.keys()))
            break
        at = changes.previous
    return states


def _from_snapshot(
    lineage: Lineage, partition: int, batch_time: int, wanted: set[str]
) -> dict[str, str | None]:
    with tempfile.TemporaryDirectory(prefix="dstreams-snapshot-") as folder:
        copy = Path(folder) / "snapshot.sqlite"
        lineage.download_snapshot(partition, batch_time, copy)
        with LocalStore(copy, read_only=True) as store:
            held = store.states(sorted(wanted))
    return {text: held[text][0] if text in held else None for text in wanted}
