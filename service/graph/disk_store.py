"""The local half of a keyed state on disk: one SQLite database per partition, on the disk of
the machine that runs the partition's tasks (docs/architecture.md, "State on disk").

SQLite (Python's own `sqlite3`) keeps the keys in a B-tree on disk and only a bounded page
cache in memory (`CACHE_KIB` per open store), so the state's size is bounded by the disk, not by
the executors' memory, and a batch reads and writes only the keys it touches.

A store is a cache of its partition's durable changes (`service.graph.disk_changelog`): it says
which batch it is at (`version`), and whatever it lost (a new machine, a crash of the host) is
rebuilt from the durable snapshot and changes. Each batch's commit also keeps, for the last
`UNDO_BATCHES` batches, the values the batch replaced (`undo`), so a live query can read a
key as of the last *completed* batch while the store already holds a later one.

Tables (keys and states are JSON text, see `disk_changelog`)::

    state(key PRIMARY KEY, value, touched)         -- touched: batch time of the last value
    undo(key, batch, value, touched)               -- value before `batch`; NULL: absent
    versions(batch PRIMARY KEY, previous)          -- the batches `undo` covers
    meta(name PRIMARY KEY, value)                  -- version, since_snapshot, keys
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from service.graph.disk_changelog import Changes

CACHE_KIB = 32 * 1024
"""SQLite's page cache per open store: what bounds a task's memory for the state."""
UNDO_BATCHES = 8
"""Batches whose replaced values a store keeps for queries as of an earlier batch."""
_CHUNK = 500
"""Keys per `IN (...)` lookup."""
_SCHEMA = """
CREATE TABLE IF NOT EXISTS state (
    key TEXT PRIMARY KEY, value TEXT NOT NULL, touched INTEGER NOT NULL) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS undo (
    key TEXT NOT NULL, batch INTEGER NOT NULL, value TEXT, touched INTEGER,
    PRIMARY KEY (key, batch)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS versions (batch INTEGER PRIMARY KEY, previous INTEGER);
CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value INTEGER) WITHOUT ROWID;
"""
Stored = tuple[str, int]
"""A key's state (JSON text) and the batch time of its last value."""


class LocalStore:
    """One partition's SQLite store. Not shared between threads; open, use, close."""

    def __init__(
        self, path: Path, *, with_ttl: bool = False, keep_undo: bool = True, read_only: bool = False
    ) -> None:
        self.path = path
        self.keep_undo = keep_undo
        """Whether commits keep what they replaced (for queries; a state nobody queries
        skips the writes)."""
        if read_only:
            # A live query, from another process than the tasks that write the store.
            self.db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5)
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        self.db = sqlite3.connect(path, isolation_level=None, timeout=60)
        self.db.execute("PRAGMA journal_mode=WAL")
        # A store is rebuilt from the durable changes whatever it loses, so a commit need not
        # reach the disk before the task goes on; WAL keeps the file whole across a crash.
        self.db.execute("PRAGMA synchronous=NORMAL")
        self.db.execute(f"PRAGMA cache_size=-{CACHE_KIB}")
        self.db.executescript(_SCHEMA)
        if with_ttl:
            self.db.execute("CREATE INDEX IF NOT EXISTS state_touched ON state (touched)")

    def close(self) -> None:
        self.db.close()

    def __enter__(self) -> LocalStore:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    # --- what the store is at ---------------------------------------------------------------

    def meta(self, name: str) -> int | None:
        row = self.db.execute("SELECT value FROM meta WHERE name = ?", (name,)).fetchone()
        return None if row is None else int(row[0])

    @property
    def version(self) -> int | None:
        """The batch whose state the store holds; None when it holds none yet."""
        return self.meta("version")

    @property
    def keys(self) -> int:
        return self.meta("keys") or 0

    def can_answer(self, batch_time: int) -> bool:
        """Whether the store can say what it held as of `batch_time`: it holds that batch or a
        later one, and kept what every batch after `batch_time` replaced."""
        version = self.version
        if version is None or version < batch_time:
            return False
        if version == batch_time:
            return True
        oldest = self.db.execute(
            "SELECT batch, previous FROM versions ORDER BY batch LIMIT 1"
        ).fetchone()
        if oldest is None:
            return False
        _first_kept, before_it = oldest
        # Kept from the lineage's first batch on (no batch before it): any batch answers.
        return before_it is None or before_it <= batch_time

    # --- reading ---------------------------------------------------------------------------

    def states(self, keys: list[str]) -> dict[str, Stored]:
        """The stored state of each of `keys` that has one."""
        found: dict[str, Stored] = {}
        keys = sorted(keys)
        for start in range(0, len(keys), _CHUNK):
            chunk = keys[start : start + _CHUNK]
            marks = ",".join("?" * len(chunk))
            query = f"SELECT key, value, touched FROM state WHERE key IN ({marks})"  # noqa: S608 - marks only
            for key, value, touched in self.db.execute(query, chunk):
                found[key] = (value, touched)
        return found

    def idle(self, before: int) -> list[tuple[str, Stored]]:
        """The keys whose last value came at or before batch time `before` (TTL)."""
        rows = self.db.execute(
            "SELECT key, value, touched FROM state WHERE touched <= ? ORDER BY key", (before,)
        )
        return [(key, (value, touched)) for key, value, touched in rows]

    def as_of(self, key: str, batch_time: int) -> Stored | None:
        """`key`'s state as of `batch_time` (see `can_answer`); None: it had none."""
        undone = self.db.execute(
            "SELECT value, touched FROM undo WHERE key = ? AND batch > ? ORDER BY batch LIMIT 1",
            (key, batch_time),
        ).fetchone()
        if undone is not None:
            return None if undone[0] is None else (undone[0], undone[1])
        return self.states([key]).get(key)

    def range_as_of(
        self, low: str, high: str, batch_time: int, limit: int
    ) -> list[tuple[str, str]]:
        """Up to `limit` keys in `[low, high)` and their states as of `batch_time`, in order."""
        undone: dict[str, str | None] = {}
        rows = self.db.execute(
            "SELECT key, value FROM undo WHERE key >= ? AND key < ? AND batch > ? "
            "ORDER BY key, batch DESC",
            (low, high, batch_time),
        )
        for key, value in rows:
            undone[key] = value  # the last one written per key is its earliest batch's
        # Keys `undo` changes may drop out, so read as many more of the current ones.
        current = self.db.execute(
            "SELECT key, value FROM state WHERE key >= ? AND key < ? ORDER BY key LIMIT ?",
            (low, high, limit + len(undone)),
        )
        merged = {key: value for key, value in current}
        merged.update(undone)
        return sorted((k, v) for k, v in merged.items() if v is not None)[:limit]

    # --- writing ---------------------------------------------------------------------------

    def commit(self, changes: Changes, old: dict[str, Stored]) -> None:
        """Applies a batch's changes to the state (`old`: the replaced states of the changed
        keys that had one) in one transaction that also moves `version` to the batch."""
        batch = changes.batch_time
        removed = [(c.key,) for c in changes.rows if c.state is None]
        # In key order, each page of the B-tree is visited once, in one pass.
        kept = sorted((c.key, c.state, c.touched) for c in changes.rows if c.state is not None)
        added = sum(1 for c in changes.rows if c.state is not None and c.key not in old)
        gone = sum(1 for c in changes.rows if c.state is None and c.key in old)
        db = self.db
        db.execute("BEGIN IMMEDIATE")
        if self.version == batch:
            # Another attempt of the task (a speculative copy) committed the batch first; its
            # changes are the same, and committing them twice would count new keys twice.
            db.execute("ROLLBACK")
            return
        try:
            self._keep_undo(changes, old)
            db.executemany("INSERT OR REPLACE INTO state VALUES (?, ?, ?)", kept)
            db.executemany("DELETE FROM state WHERE key = ?", removed)
            self._set("version", batch)
            self._set("keys", self.keys + added - gone)
            self._set("since_snapshot", (self.meta("since_snapshot") or 0) + 1)
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise

    def apply(self, changes: Changes) -> None:
        """Brings the store from `changes.previous` to `changes.batch_time` with durable
        changes, as the batch's own task did."""
        self.commit(changes, self.states([c.key for c in changes.rows]))

    def reset(self, since_snapshot: int = 0) -> None:
        """Empties the store (the first batch of a lineage starts from nothing)."""
        db = self.db
        db.execute("BEGIN IMMEDIATE")
        for table in ("state", "undo", "versions", "meta"):
            db.execute(f"DELETE FROM {table}")  # noqa: S608 - fixed table names
        self._set("since_snapshot", since_snapshot)
        db.execute("COMMIT")

    def snapshot_taken(self) -> None:
        self._set("since_snapshot", 0)

    def copy_to(self, target: Path) -> None:
        """A consistent copy of the whole store in `target` (SQLite's online backup)."""
        copy = sqlite3.connect(target)
        try:
            self.db.backup(copy)
        finally:
            copy.close()

    def _keep_undo(self, changes: Changes, old: dict[str, Stored]) -> None:
        """Records what the batch replaces, and forgets what only batches older than the last
        `UNDO_BATCHES` replaced (every `UNDO_BATCHES` batches: a scan of the table)."""
        db = self.db
        if not self.keep_undo:
            if db.execute("SELECT 1 FROM versions LIMIT 1").fetchone() is not None:
                db.execute("DELETE FROM undo")  # kept while queried: never partly
                db.execute("DELETE FROM versions")
            return
        batch = changes.batch_time
        undo = [(c.key, batch, *old.get(c.key, (None, None))) for c in changes.rows]
        db.executemany("INSERT OR REPLACE INTO undo VALUES (?, ?, ?, ?)", undo)
        db.execute("INSERT OR REPLACE INTO versions VALUES (?, ?)", (batch, changes.previous))
        cutoff = db.execute(
            "SELECT batch FROM versions ORDER BY batch DESC LIMIT 1 OFFSET ?", (2 * UNDO_BATCHES,)
        ).fetchone()
        if cutoff is not None:
            newest_kept = db.execute(
                "SELECT batch FROM versions ORDER BY batch DESC LIMIT 1 OFFSET ?",
                (UNDO_BATCHES - 1,),
            ).fetchone()
            db.execute("DELETE FROM undo WHERE batch < ?", newest_kept)
            db.execute("DELETE FROM versions WHERE batch < ?", newest_kept)

    def _set(self, name: str, value: int) -> None:
        self.db.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (name, value))
