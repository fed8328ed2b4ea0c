"""`ProcessCache`: one client per key, replaced when unusable, forgotten (not closed) after a fork,
and kept per thread when asked."""

from __future__ import annotations

import os
import threading

import pytest

from connectors.process_cache import ProcessCache, conf_key


class Client:
    """A stand-in for a Kafka client or a database connection."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.closed = False
        self.usable = True

    def close(self) -> None:
        self.closed = True


def made() -> ProcessCache[str, Client]:
    return ProcessCache(close=Client.close, usable=lambda client: client.usable)


def test_one_client_per_key_until_it_is_evicted() -> None:
    cache = made()
    first = cache.get("a", lambda: Client("a1"))
    again = cache.get("a", lambda: Client("a2"))
    other = cache.get("b", lambda: Client("b1"))
    cache.evict("a")
    fresh = cache.get("a", lambda: Client("a3"))

    assert (first.name, again.name, other.name, fresh.name) == ("a1", "a1", "b1", "a3")
    assert first.closed and not other.closed
    assert len(cache) == 2


def test_peek_shows_a_cached_client_without_making_one() -> None:
    cache = made()
    assert cache.peek("a") is None
    first = cache.get("a", lambda: Client("a1"))

    assert cache.peek("a") is first
    assert cache.peek("b") is None
    assert len(cache) == 1  # peeking made nothing


def test_an_unusable_client_is_closed_and_replaced() -> None:
    cache = made()
    stale = cache.get("a", lambda: Client("old"))
    stale.usable = False

    replacement = cache.get("a", lambda: Client("new"))

    assert replacement.name == "new" and stale.closed


def test_discard_forgets_a_client_under_any_key_and_close_all_closes_the_rest() -> None:
    cache = made()
    shared = Client("shared")
    cache.get("a", lambda: shared)
    cache.get("b", lambda: shared)
    kept = cache.get("c", lambda: Client("c"))

    cache.discard(shared)
    assert shared.closed and len(cache) == 1 and not kept.closed
    cache.close_all()
    assert kept.closed and len(cache) == 0


def test_a_failing_close_does_not_stop_the_others() -> None:
    def close(client: Client) -> None:
        if client.name == "bad":
            msg = "the handle is gone"
            raise RuntimeError(msg)
        client.close()

    cache: ProcessCache[str, Client] = ProcessCache(close=close)
    good = cache.get("good", lambda: Client("good"))
    cache.get("bad", lambda: Client("bad"))

    cache.close_all()

    assert good.closed and len(cache) == 0


def test_a_per_thread_cache_gives_each_thread_its_own_client() -> None:
    cache: ProcessCache[str, Client] = ProcessCache(close=Client.close, per_thread=True)
    mine = cache.get("dsn", lambda: Client("main"))
    theirs: list[Client] = []
    worker = threading.Thread(
        target=lambda: theirs.append(cache.get("dsn", lambda: Client("worker")))
    )
    worker.start()
    worker.join()

    assert mine.name == "main" and theirs[0].name == "worker"
    assert cache.get("dsn", lambda: Client("again")) is mine


@pytest.mark.parametrize("per_thread", [False, True])
def test_a_forked_child_starts_empty_and_leaves_the_parents_clients_open(
    per_thread: bool,
) -> None:
    cache: ProcessCache[str, Client] = ProcessCache(close=Client.close, per_thread=per_thread)
    parents = cache.get("a", lambda: Client("parent"))
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report what it sees, then leave without running any cleanup
        try:
            child = cache.get("a", lambda: Client("child"))
            cache.close_all()
            os.write(write_end, f"{child.name} {parents.closed}".encode())
        finally:
            os._exit(0)
    os.close(write_end)
    report = os.read(read_end, 100).decode()
    os.waitpid(pid, 0)
    os.close(read_end)

    assert report == "child False"
    assert cache.get("a", lambda: Client("other")) is parents


def test_equal_configurations_give_equal_keys_and_types_are_told_apart() -> None:
    assert conf_key({"a": "1", "b": 2}) == conf_key({"b": 2, "a": "1"})
    assert conf_key({"a": "1"}) != conf_key({"a": 1})
    assert hash(conf_key({"cb": [1, 2]})) == hash(conf_key({"cb": [1, 2]}))
