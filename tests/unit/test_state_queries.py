"""Live state queries without Spark: routing and parsing of `/state/...`, limits, the shapes of
the answers, when the registry answers at all, the query deadline, and `dstreams run` starting
itself again under the workers' hash seed. Spark's side: tests/spark/test_state_queries.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import urllib.error
import urllib.request
from collections.abc import Hashable, Iterator
from pathlib import Path
from typing import Any

import pytest

from service.cli.hash_seed import RESTARTED, restart_needed
from service.errors import ConfigError
from service.graph.query_jobs import Deadline
from service.graph.queryable import (
    MAX_LIMIT,
    BadQuery,
    Found,
    NotQueryable,
    QueryableStates,
    QueryUnavailable,
    Scanned,
)
from service.observe.http import HttpServer
from service.observe.metrics import Metrics
from service.observe.state_routes import Lookup, Scan, answer, parse_state_path
from service.observe.status import StatusBoard

pytestmark = pytest.mark.unit
ROOT = Path(__file__).resolve().parents[2]


class FakeQueries:
    """Answers as the registry would, from a dict, as of batch 5000; `unavailable` makes every
    query a 503 with that reason."""

    def __init__(self, state: dict[Hashable, Any], unavailable: str | None = None) -> None:
        self.state = state
        self.unavailable = unavailable
        self.asked: list[Any] = []

    def _check(self, stream: str) -> None:
        if self.unavailable is not None:
            raise QueryUnavailable(self.unavailable)
        if stream != "totals":
            msg = f"no queryable state is named {stream!r}"
            raise NotQueryable(msg)

    def lookup(self, stream: str, key: Hashable) -> Found:
        self._check(stream)
        self.asked.append(key)
        if key not in self.state:
            return Found(stream, key, 5000, found=False)
        return Found(stream, key, 5000, found=True, value=self.state[key])

    def scan(self, stream: str, prefix: str, limit: int = 100) -> Scanned:
        self._check(stream)
        keys = [k for k in self.state if isinstance(k, str) and k.startswith(prefix)]
        entries = tuple((k, self.state[k]) for k in keys[:limit])
        return Scanned(stream, prefix, limit, 5000, entries, len(keys) > limit)


# --- parsing --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "query", "expected"),
    [
        ("/state/totals/apple", {}, Lookup("totals", "apple")),
        ("/state/totals/a%2Fb%20c", {}, Lookup("totals", "a/b c")),
        ("/state/totals/", {}, Lookup("totals", "")),
        ("/state/totals", {"key_json": "42"}, Lookup("totals", 42)),
        ("/state/totals", {"key_json": '["eu", [1, null]]'}, Lookup("totals", ("eu", (1, None)))),
        ("/state/totals", {"prefix": ""}, Scan("totals", "", 100)),
        ("/state/totals", {"prefix": "ap", "limit": "1000"}, Scan("totals", "ap", 1000)),
    ],
)
def test_each_form_of_query_is_parsed(path: str, query: dict[str, str], expected: Any) -> None:
    assert parse_state_path(path, query) == expected


@pytest.mark.parametrize(
    ("path", "query", "says"),
    [
        ("/state/", {}, "name the state"),
        ("/state/totals", {}, "none of them"),
        ("/state/totals/a", {"prefix": "a"}, "a key in the path, prefix"),
        ("/state/totals", {"key_json": "1", "prefix": "a"}, "key_json, prefix"),
        ("/state/totals", {"key_json": "{not json"}, "not JSON"),
        ("/state/totals", {"key_json": '{"a": 1}'}, "an object cannot be a key"),
        ("/state/totals", {"key_json": "NaN"}, "NaN"),
        ("/state/totals", {"prefix": "a", "limit": "0"}, "between 1 and 1000"),
        ("/state/totals", {"prefix": "a", "limit": str(MAX_LIMIT + 1)}, "between 1 and 1000"),
        ("/state/totals", {"prefix": "a", "limit": "-3"}, "whole number"),
        ("/state/totals", {"prefix": "a", "limit": "ten"}, "whole number"),
    ],
)
def test_a_query_that_means_nothing_is_refused_saying_why(
    path: str, query: dict[str, str], says: str
) -> None:
    with pytest.raises(BadQuery, match=says):
        parse_state_path(path, query)
    status, document = answer(FakeQueries({}), "GET", path, query)
    assert status == 400 and says in document["error"]


# --- answers --------------------------------------------------------------------------------


def test_a_found_key_names_its_value_and_the_batch() -> None:
    queries = FakeQueries({"apple": 3, ("eu", 7): (1, "x"), "odd": {1, 2}})
    assert answer(queries, "GET", "/state/totals/apple", {}) == (
        200,
        {"stream": "totals", "key": "apple", "batch_time_ms": 5000, "value": 3, "encoding": "json"},
    )
    status, document = answer(queries, "GET", "/state/totals", {"key_json": '["eu", 7]'})
    assert (status, document["key"], document["value"]) == (200, ["eu", 7], [1, "x"])
    status, document = answer(queries, "GET", "/state/totals/odd", {})
    assert (document["value"], document["encoding"]) == ("{1, 2}", "repr")


def test_an_absent_key_is_404_naming_the_batch() -> None:
    status, document = answer(FakeQueries({}), "GET", "/state/totals/kiwi", {})
    assert status == 404
    assert document["batch_time_ms"] == 5000 and document["key"] == "kiwi"


def test_a_prefix_answer_lists_entries_and_says_whether_there_are_more() -> None:
    queries = FakeQueries({"apple": 1, "apricot": 2, "banana": 3})
    status, document = answer(queries, "GET", "/state/totals", {"prefix": "ap", "limit": "1"})
    assert status == 200
    assert document == {
        "stream": "totals",
        "prefix": "ap",
        "limit": 1,
        "batch_time_ms": 5000,
        "entries": [{"key": "apple", "value": 1, "encoding": "json"}],
        "more": True,
    }


def test_a_state_not_queryable_is_404_without_listing_names() -> None:
    status, document = answer(FakeQueries({"apple": 1}), "GET", "/state/secret/apple", {})
    assert status == 404 and "totals" not in json.dumps(document)


def test_unavailable_states_are_503_and_other_methods_405() -> None:
    assert answer(None, "GET", "/state/totals/apple", {})[0] == 503
    recovering = FakeQueries({}, unavailable="the driver is recovering")
    status, document = answer(recovering, "GET", "/state/totals/apple", {})
    assert (status, document["error"]) == (503, "the driver is recovering")
    assert answer(FakeQueries({}), "POST", "/state/totals/apple", {})[0] == 405


# --- the registry without Spark -----------------------------------------------------------


class EmptyState:
    """A keyed state that holds nothing yet."""

    partitions = 4

    def queryable_rdd(self) -> None:
        return None


def test_names_are_url_segments_taken_once() -> None:
    states = QueryableStates(lambda: None)
    state = EmptyState()
    states.add("totals.v2", state)
    with pytest.raises(ConfigError, match="name is taken"):
        states.add("totals.v2", EmptyState())
    with pytest.raises(ConfigError, match="queryable as 'totals.v2' already"):
        states.add("other", state)
    for bad in ("", "a/b", "-x", "a b", "x" * 101):
        with pytest.raises(ConfigError, match="letters, digits"):
            states.add(bad, EmptyState())


def test_the_registry_answers_only_after_recovery_and_a_completed_batch() -> None:
    states = QueryableStates(lambda: None)
    states.add("totals", EmptyState())
    with pytest.raises(NotQueryable):
        states.lookup("hidden", "a")  # 404 whatever the phase
    states.publish(1000)  # a batch replayed during recovery
    with pytest.raises(QueryUnavailable, match="recovering"):
        states.lookup("totals", "a")
    fresh = QueryableStates(lambda: None)
    fresh.add("totals", EmptyState())
    fresh.open()
    with pytest.raises(QueryUnavailable, match="no batch has completed"):
        fresh.scan("totals", "a")
    states.open()
    assert states.lookup("totals", "a") == Found("totals", "a", 1000, found=False)
    assert states.scan("totals", "") == Scanned("totals", "", 100, 1000, (), more=False)
    with pytest.raises(BadQuery, match="limit"):
        states.scan("totals", "", MAX_LIMIT + 1)


def test_a_deadline_refuses_once_it_has_passed() -> None:
    now = [10.0]
    deadline = Deadline(2.0, clock=lambda: now[0])
    assert deadline.remaining_s() == 2.0
    now[0] = 12.0
    with pytest.raises(QueryUnavailable, match="longer than its 2 s"):
        deadline.remaining_s()


# --- over HTTP ------------------------------------------------------------------------------


@pytest.fixture
def base() -> Iterator[str]:
    queries = FakeQueries({"a b": 1, "apple": [1, 2]})
    server = HttpServer(
        StatusBoard("wc", 1000), Metrics(process_metrics=False), "127.0.0.1", 0, lambda: queries
    )
    port = server.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.stop()


def get(url: str) -> tuple[int, str, Any]:
    try:
        with urllib.request.urlopen(url, timeout=10) as reply:  # noqa: S310 - loopback, ours
            return reply.status, reply.headers["Content-Type"], json.loads(reply.read())
    except urllib.error.HTTPError as error:
        return error.code, error.headers["Content-Type"], json.loads(error.read())


def test_the_driver_serves_state_queries_as_json(base: str) -> None:
    status, content_type, document = get(f"{base}/state/totals/a%20b")
    assert (status, content_type, document["value"]) == (200, "application/json", 1)
    status, _, document = get(f"{base}/state/totals?prefix=")  # a blank prefix: every key
    assert status == 200 and len(document["entries"]) == 2
    assert get(f"{base}/state/nope/a")[0] == 404


def test_the_driver_without_a_graph_yet_answers_503() -> None:
    server = HttpServer(StatusBoard("wc", 1000), Metrics(process_metrics=False), "127.0.0.1", 0)
    port = server.start()
    try:
        status, _, document = get(f"http://127.0.0.1:{port}/state/totals/a")
        assert status == 503 and "starting" in document["error"]
    finally:
        server.stop()


# --- the hash seed --------------------------------------------------------------------------


def test_run_starts_itself_again_under_the_workers_seed(tmp_path: Path) -> None:
    script = textwrap.dedent(
        """
        import sys
        from service.cli.hash_seed import restart_with_hash_seed
        restart_with_hash_seed()
        print(sys.flags.hash_randomization, hash("dstreams"))
        """
    )
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONHASHSEED", RESTARTED)}
    env["PYTHONPATH"] = str(ROOT)
    runs = [
        subprocess.run(  # noqa: S603 - this interpreter, our own script
            [sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True
        ).stdout.split()
        for _ in range(2)
    ]
    assert runs[0][0] == "0" and runs[0] == runs[1]  # seed 0 both times: the same hash
    assert not restart_needed({RESTARTED: "1"})
