"""Clients kept for the life of one process: Kafka consumers and producers, database connections.

Spark's Python workers run task after task, so a client opened by one task serves the next ones
and a batch pays no connection set-up. Each cache is keyed by the client's configuration and
forgets everything after a fork: a forked child inherits the parent's handles but not the
threads behind them (librdkafka's, a database driver's), so using or even closing them could
hang; the child opens its own.

>>> opened = []
>>> cache = ProcessCache(close=opened.remove)
>>> def open_client():
...     opened.append(object())
...     return opened[-1]
>>> first = cache.get(conf_key({"bootstrap.servers": "b:9092"}), open_client)
>>> cache.get(conf_key({"bootstrap.servers": "b:9092"}), open_client) is first
True
>>> cache.close_all()
>>> opened, len(cache)
([], 0)
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import Callable, Hashable, Iterator, Mapping
from typing import Any, Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")

ConfKey = tuple[tuple[str, str], ...]
"""The key `conf_key` makes of a client configuration."""

_LOG = logging.getLogger(__name__)


def conf_key(conf: Mapping[str, Any]) -> ConfKey:
    """A hashable key for a client configuration; equal configurations give equal keys.

    ``repr`` keeps unhashable values from breaking the cache and tells ``1`` from ``"1"``;
    callbacks (a logger, a delivery report) compare by identity.
    """
    return tuple(sorted((str(name), repr(value)) for name, value in conf.items()))


class ProcessCache(Generic[K, V]):
    """This process's clients by key: created on first use, closed when evicted or discarded.

    ``usable(client)`` is asked on every `get`; a client it refuses is closed and replaced.
    Shared caches hold a lock while they create a client, so two threads never make two
    clients for one key (two producers with one transactional.id would fence each other).
    ``per_thread`` keeps one client per key *and thread* instead, for clients that a thread's
    work must not share (a database connection carries the thread's open transaction).
    """

    def __init__(
        self,
        close: Callable[[V], object],
        *,
        usable: Callable[[V], bool] | None = None,
        per_thread: bool = False,
    ) -> None:
        self._close = close
        self._usable = usable
        self._per_thread = per_thread
        self._local = threading.local()
        self._pid = os.getpid()
        self._shared: dict[K, V] = {}
        self._lock = threading.Lock()

    def get(self, key: K, create: Callable[[], V]) -> V:
        """The client of `key`, made by `create()` if there is none or it is no longer usable."""
        with self._guard() as entries:
            client = entries.get(key)
            if client is not None and self._usable is not None and not self._usable(client):
                del entries[key]
                self._close_quietly(client)
                client = None
            if client is None:
                client = entries[key] = create()
            return client

    def peek(self, key: K) -> V | None:
        """The client of `key` if one is cached, as it is: nothing is made, checked or closed."""
        with self._guard() as entries:
            return entries.get(key)

    def evict(self, key: K) -> None:
        """Forget and close the client of `key`, if any; the next `get` makes a new one."""
        with self._guard() as entries:
            client = entries.pop(key, None)
        if client is not None:
            self._close_quietly(client)

    def discard(self, client: V) -> None:
        """Forget `client` under whatever key it has, and close it."""
        with self._guard() as entries:
            for key in [key for key, cached in entries.items() if cached is client]:
                del entries[key]
        self._close_quietly(client)

    def close_all(self) -> None:
        """Close every client of this process (this thread's, for a per-thread cache)."""
        with self._guard() as entries:
            clients = list(entries.values())
            entries.clear()
        for client in clients:
            self._close_quietly(client)

    def __len__(self) -> int:
        with self._guard() as entries:
            return len(entries)

    @contextlib.contextmanager
    def _guard(self) -> Iterator[dict[K, V]]:
        """This process's (or thread's) entries, under the lock when threads share them."""
        if self._per_thread:
            yield self._thread_entries()
            return
        if os.getpid() != self._pid:  # a forked child: forget the parent's clients and lock
            self._pid, self._shared, self._lock = os.getpid(), {}, threading.Lock()
        with self._lock:
            yield self._shared

    def _thread_entries(self) -> dict[K, V]:
        pid, entries = getattr(self._local, "entries", (None, None))
        if pid != os.getpid() or entries is None:
            entries = {}
            self._local.entries = (os.getpid(), entries)
        return entries

    def _close_quietly(self, client: V) -> None:
        try:
            self._close(client)
        except Exception as exc:  # best effort: the client is dropped either way
            _LOG.debug("closing a cached client failed: %s", exc)
