"""What one task of a keyed state on disk does: one partition of one batch (docs/architecture.md,
"State on disk").

1. If the batch's changes for the partition are durable already, the batch ran before (a
   replay after a crash, a retried task, recovery's catch-up): its output is those changes,
   read back, and the local store, if it is at the batch before, takes them in.
2. Otherwise the local store is brought to the batch before (`previous`): as it is, or by
   taking in the durable changes since its version, or from the newest durable snapshot on the
   partition's chain and the changes after it, or from nothing at the lineage's origin.
3. `update(new_values, state)` runs for each key with new values, in the order the values
   arrived (as `update_state_by_key`'s does); None removes the key. With a TTL, keys that got
   no value for that long are removed without a call.
4. The changes are published durably, then committed to the local store, which now holds the
   batch; every `snapshot_every` batches a copy of the store is published beside them.

The output, the first time and on every replay alike, is the changes decoded from the JSON
text that was stored: `(key, state)` per key that got a value, `(key, None)` per key removed.
Only plain functions and frozen values here: executors get them pickled.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from service import faults
from service.graph import state_functions as fn
from service.graph.checkpoint_store import decode_value, encode_value
from service.graph.disk_changelog import Change, Changes, DiskStateError, Lineage
from service.graph.disk_store import LocalStore, Stored

_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)
_INTEGER_START = frozenset("-0123456789")


def text_of(value: Any) -> str:
    """A key or state as the JSON text the store keeps (one text per value: keys are looked up
    by it)."""
    return _ENCODER.encode(encode_value(value))


def value_of(text: str) -> Any:
    """Inverse of `text_of`; an integer (a count, a total: the common state) and a string
    without escapes (the common key) skip the JSON parser."""
    first = text[0]
    if first in _INTEGER_START:
        try:
            return int(text)
        except ValueError:
            pass  # a float, in JSON's form
    elif first == '"' and "\\" not in text:
        return text[1:-1]  # a string without escapes
    return decode_value(json.loads(text))


def decoded(changes: Changes) -> Iterator[tuple[Any, Any]]:
    for change in changes.rows:
        state = None if change.state is None else value_of(change.state)
        yield (value_of(change.key), state)


@dataclass(frozen=True)
class DiskStateTask:
    """Everything a task needs to run a batch of one state stream on one partition."""

    lineage: Lineage
    local_root: str
    """The stream's folder on the executor's local disk (absolute)."""
    update: fn.UpdateFunction
    ttl_ms: int | None
    snapshot_every: int
    keep_undo: bool
    """Whether the stores keep what their last batches replaced (a queryable state)."""

    def store_path(self, partition: int) -> Path:
        lineage = self.lineage
        folder = Path(self.local_root) / f"{lineage.origin}-of-{lineage.partitions}"
        return folder / f"p{partition:05d}.sqlite"

    def open(self, partition: int) -> LocalStore:
        path = self.store_path(partition)
        return LocalStore(path, with_ttl=self.ttl_ms is not None, keep_undo=self.keep_undo)

    def run(
        self, batch_time: int, previous: int | None, partition: int, rows: Iterable[Any]
    ) -> Iterator[tuple[Any, Any]]:
        done = self.lineage.read_changes(partition, batch_time)
        if done is not None:
            _check_chain(done, previous)
            self._take_in(partition, done)
            yield from decoded(done)
            return
        news = _news_by_key(rows)
        store = self._store_at(partition, previous)
        try:
            changes, old = self._changes(store, batch_time, previous, news)
            self.lineage.write_changes(partition, changes)
            faults.crash_point("state-changes-published")
            store.commit(changes, old)
            self._maybe_snapshot(store, partition, batch_time)
        finally:
            store.close()
        yield from decoded(changes)

    # --- the batch ---------------------------------------------------------------------------

    def _changes(
        self,
        store: LocalStore,
        batch_time: int,
        previous: int | None,
        news: dict[Any, list[tuple[Any, ...]]],
    ) -> tuple[Changes, dict[str, Stored]]:
        texts = {key: text_of(key) for key in news}
        old = store.states(list(texts.values()))
        rows: list[Change] = []
        for key, tagged in sorted(news.items(), key=fn.first_arrival):
            text = texts[key]
            stored = old.get(text)
            new = self.update(
                fn.values_in_order(tagged), None if stored is None else value_of(stored[0])
            )
            if new is not None:
                rows.append(Change(text, text_of(new), batch_time))
            elif stored is not None:
                rows.append(Change(text, None, batch_time))
        if self.ttl_ms is not None:
            touched = set(texts.values())
            for text, stored in store.idle(batch_time - self.ttl_ms):
                if text not in touched:
                    rows.append(Change(text, None, stored[1]))
                    old[text] = stored
        return Changes(batch_time, previous, tuple(rows)), old

    def _maybe_snapshot(
        self, store: LocalStore, partition: int, batch_time: int, *, always: bool = False
    ) -> None:
        if not always and (store.meta("since_snapshot") or 0) < self.snapshot_every:
            return
        copy = store.path.with_name(f".{store.path.name}.{os.getpid()}.snapshot")
        try:
            store.copy_to(copy)
            self.lineage.upload_snapshot(partition, batch_time, copy)
        finally:
            copy.unlink(missing_ok=True)
        store.snapshot_taken()

    # --- bringing the local store to a batch -------------------------------------------------

    def _take_in(self, partition: int, done: Changes) -> None:
        """A replayed batch moves the local store on too, when it is just before it (an empty
        or missing store is just before the lineage's first batch)."""
        if done.previous is not None and not self.store_path(partition).exists():
            return
        with self.open(partition) as store:
            if store.version == done.previous:
                store.apply(done)

    def _store_at(self, partition: int, previous: int | None) -> LocalStore:
        store = self.open(partition)
        if store.version == previous and previous is not None:
            return store
        if previous is None:
            # The lineage's first batch. Partitions take their snapshots in turns.
            store.reset(
                since_snapshot=-(partition * self.snapshot_every // self.lineage.partitions)
            )
            return store
        behind: list[Changes] = []
        at: int | None = previous
        while at is not None and at != store.version:
            if self.lineage.has_snapshot(partition, at):
                store = self._from_snapshot(store, partition, at)
                break
            changes = self.lineage.read_changes(partition, at)
            if changes is None:
                raise self.lineage.missing(partition, at)
            behind.append(changes)
            at = changes.previous
        if at is None:
            store.reset()
        for changes in reversed(behind):
            store.apply(changes)
        return store

    def _from_snapshot(self, store: LocalStore, partition: int, batch_time: int) -> LocalStore:
        path = store.path
        store.close()
        download = path.with_name(f".{path.name}.{os.getpid()}.download")
        self.lineage.download_snapshot(partition, batch_time, download)
        for suffix in ("-wal", "-shm"):
            Path(f"{path}{suffix}").unlink(missing_ok=True)
        download.replace(path)
        store = self.open(partition)
        holds = store.version
        if holds != batch_time:
            store.close()
            msg = f"the snapshot of batch {batch_time} of partition {partition} holds {holds}"
            raise DiskStateError(msg)
        store.snapshot_taken()
        return store


def _news_by_key(rows: Iterable[Any]) -> dict[Any, list[tuple[Any, ...]]]:
    """Each key's `NEW` entries (`state_functions.tag_new_values`)."""
    news: dict[Any, list[tuple[Any, ...]]] = {}
    for key, entry in rows:
        tagged = news.get(key)
        if tagged is None:
            news[key] = [entry]
        else:
            tagged.append(entry)
    return news


def _check_chain(done: Changes, previous: int | None) -> None:
    if done.previous != previous:
        msg = (
            f"the durable changes of batch {done.batch_time} follow batch {done.previous}, but "
            f"the journal puts batch {previous} before it; the checkpoint folder belongs to "
            "another run of this job: give the job a new checkpoint path or app id"
        )
        raise DiskStateError(msg)


def run_partition(
    task: DiskStateTask, batch_time: int, previous: int | None, partition: int, rows: Iterable[Any]
) -> Iterator[tuple[Any, Any]]:
    """`mapPartitionsWithIndex`'s function (a top-level one: pickled by reference)."""
    return task.run(batch_time, previous, partition, rows)


def dump_partition(
    task: DiskStateTask, batch_time: int, partition: int, _rows: Iterable[Any]
) -> Iterator[tuple[Any, tuple[str, str, int]]]:
    """Every key of `partition` as of `batch_time`, keyed by its value for a shuffle into
    another partition count (`DiskKeyedState.rescale`)."""
    store = task._store_at(partition, batch_time)  # noqa: SLF001 - its own kind's task
    try:
        for key, value, touched in store.db.execute("SELECT key, value, touched FROM state"):
            yield (value_of(key), (key, value, touched))
    finally:
        store.close()


def load_partition(
    task: DiskStateTask, batch_time: int, partition: int, rows: Iterable[Any]
) -> Iterator[int]:
    """A new partition's store from the keys moved into it, at `batch_time`, published as the
    new lineage's first snapshot (with empty changes, the chain's start); yields its keys."""
    path = task.store_path(partition)
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    moved = sorted(stored for _key, stored in rows)
    # Nothing to keep for queries: no batch before this one is asked of the new lineage.
    with LocalStore(path, with_ttl=task.ttl_ms is not None, keep_undo=False) as store:
        store.reset()
        store.commit(Changes(batch_time, None, tuple(Change(k, v, t) for k, v, t in moved)), {})
        task.lineage.write_changes(partition, Changes(batch_time, None, ()))
        task._maybe_snapshot(store, partition, batch_time, always=True)  # noqa: SLF001
    yield len(moved)
