"""Live queries of keyed state: a queryable state's value of one key, or its keys with a prefix,
as of the last completed batch (docs/architecture.md, "Live state queries").

A keyed state (`update_state_by_key`, `map_with_state`) answers only when the job names it with
`.queryable(name)`. The lifecycle calls `publish(t)` once batch `t` is journaled completed (and
checkpointed, when it was its turn): every queryable state's RDD of `t` becomes what queries
read, replacing that of the batch before. A completed batch's state is final: a replay computes
it again from the same journaled offsets, through the same functions, into the same value, and
nothing replays a completed batch's outputs. A batch still in flight is never published, so no
answer shows a state that a failure could take back.

Memory: a publication is a reference to the RDD the state keeps anyway (its latest, persisted,
or read back from a checkpoint); the lifecycle publishes a batch before the state may release
the RDD of the batch before. A query still reading an RDD that was released meanwhile (a
checkpoint's restore releases it just before the batch is published) gets the same answer,
recomputed from the RDD's lineage, only slower (its deadline bounds it).
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from functools import partial
from typing import Any

from service.errors import ConfigError, DStreamsError
from service.graph.base import RDD, QueryableState, StoredState
from service.graph.disk_queries import find_on_disk, scan_on_disk
from service.graph.query_jobs import Deadline, QueryUnavailable, key_partition, run_on_partitions
from service.graph.state_lookup import find_key, find_prefix

__all__ = [
    "DEFAULT_LIMIT",
    "DEFAULT_TIMEOUT_S",
    "MAX_LIMIT",
    "BadQuery",
    "Found",
    "NotQueryable",
    "QueryUnavailable",
    "QueryableStates",
    "Scanned",
    "check_limit",
]

QUERY_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,99}")
"""A queryable state's name: it is a segment of the query's URL."""
DEFAULT_LIMIT = 100
MAX_LIMIT = 1000
"""The most keys one prefix query returns: a prefix query may read every partition."""
DEFAULT_TIMEOUT_S = 10.0


class NotQueryable(DStreamsError):
    """No queryable state has the name asked for (HTTP 404)."""


class BadQuery(DStreamsError):
    """A query that cannot mean anything (HTTP 400): a limit out of range, an unhashable key."""


@dataclass(frozen=True)
class Published:
    """What one queryable state answers from: its RDD as of a completed batch (None when it
    held nothing then) and that RDD's partition count."""

    batch_time: int
    rdd: RDD | None
    partitions: int
    version: int | None = None
    """A state on disk: the batch its stores were at when `batch_time` completed."""


@dataclass(frozen=True)
class Found:
    """One key's state as of `batch_time`; `found` is False when the key had none."""

    stream: str
    key: Hashable
    batch_time: int
    found: bool
    value: Any = None


@dataclass(frozen=True)
class Scanned:
    """Up to `limit` keys with `prefix` and their states as of `batch_time`; `more` when the
    state held further ones."""

    stream: str
    prefix: str
    limit: int
    batch_time: int
    entries: tuple[tuple[str, Any], ...]
    more: bool


def check_limit(limit: int) -> int:
    if not 1 <= limit <= MAX_LIMIT:
        msg = f"limit must be between 1 and {MAX_LIMIT}, got {limit}"
        raise BadQuery(msg)
    return limit


class QueryableStates:
    """The graph's queryable keyed states by name, and the completed batch each answers from.

    `publish` runs on the scheduler's thread, queries on HTTP request threads: a publication is
    swapped in whole under a lock, and a query reads the one current when it starts."""

    def __init__(self, sc_of: Callable[[], Any]) -> None:
        self._sc_of = sc_of
        self._states: dict[str, QueryableState | StoredState] = {}
        self._published: dict[str, Published] = {}
        self._lock = threading.Lock()
        self._open = False
        self.timeout_s = DEFAULT_TIMEOUT_S
        """How long a query's Spark jobs may take in all before it is answered 503."""

    def add(self, name: str, state: QueryableState | StoredState) -> None:
        """Makes `state` answer queries as `name`; a name and a state are taken once each."""
        if not QUERY_NAME.fullmatch(name):
            msg = (
                f"queryable({name!r}): a name is 1-100 letters, digits, '_', '.' or '-', "
                "starting with a letter or digit (it is part of the query's URL)"
            )
            raise ConfigError(msg)
        if name in self._states:
            msg = f"queryable({name!r}): the name is taken; give each queryable state its own"
            raise ConfigError(msg)
        taken = [other for other, known in self._states.items() if known is state]
        if taken:
            msg = f"queryable({name!r}): this state is queryable as {taken[0]!r} already"
            raise ConfigError(msg)
        self._states[name] = state

    @property
    def names(self) -> list[str]:
        return sorted(self._states)

    def publish(self, batch_time: int) -> None:
        """Batch `batch_time` is completed: queries answer from its states from now on."""
        if not self._states:
            return
        published = {}
        for name, state in self._states.items():
            if isinstance(state, StoredState):
                published[name] = Published(batch_time, None, state.partitions, state.version)
                continue
            rdd = state.queryable_rdd()
            partitions = rdd.getNumPartitions() if rdd is not None else state.partitions
            published[name] = Published(batch_time, rdd, partitions)
        with self._lock:
            self._published = published

    def open(self) -> None:
        """Recovery has finished: queries are answered (until then 503)."""
        with self._lock:
            self._open = True

    def lookup(self, stream: str, key: Hashable) -> Found:
        """`key`'s state in `stream`, reading the one partition that holds it."""
        published = self._current(stream)
        state = self._states[stream]
        deadline = Deadline(self.timeout_s)
        sc = self._sc_of()
        if isinstance(state, StoredState):
            found, value = find_on_disk(sc, state, key, published.version, deadline)
            return Found(stream, key, published.batch_time, found=found, value=value)
        if published.rdd is None:
            return Found(stream, key, published.batch_time, found=False)
        partition = key_partition(sc, key, published.partitions, deadline)
        values = run_on_partitions(sc, published.rdd, partial(find_key, key), [partition], deadline)
        if not values:
            return Found(stream, key, published.batch_time, found=False)
        return Found(stream, key, published.batch_time, found=True, value=values[0])

    def scan(self, stream: str, prefix: str, limit: int = DEFAULT_LIMIT) -> Scanned:
        """Up to `limit` string keys of `stream` starting with `prefix`, partition by partition
        (one Spark job each), stopping at the first partition that makes the limit."""
        check_limit(limit)
        published = self._current(stream)
        entries: list[tuple[str, Any]] = []
        state = self._states[stream]
        if isinstance(state, StoredState):
            entries = scan_on_disk(state, prefix, limit + 1, published.version)
        elif published.rdd is not None:
            deadline = Deadline(self.timeout_s)
            sc = self._sc_of()
            for partition in range(published.partitions):
                # One more than needed, to tell whether the state holds more.
                wanted = partial(find_prefix, prefix, limit + 1 - len(entries))
                entries += run_on_partitions(sc, published.rdd, wanted, [partition], deadline)
                if len(entries) > limit:
                    break
        batch_time = published.batch_time
        more = len(entries) > limit
        return Scanned(stream, prefix, limit, batch_time, tuple(entries[:limit]), more)

    def _current(self, stream: str) -> Published:
        with self._lock:
            is_open, published = self._open, self._published.get(stream)
        if stream not in self._states:
            msg = f"no queryable state is named {stream!r}"
            raise NotQueryable(msg)
        if not is_open:
            msg = "the driver is recovering; state queries are answered once it has"
            raise QueryUnavailable(msg)
        if published is None:
            msg = "no batch has completed since the driver started; try again shortly"
            raise QueryUnavailable(msg)
        return published
