"""`/state/...`: live queries of the keyed states a job made queryable, as HTTP answers.

- `GET /state/<name>/<key>`: the state of the string key `<key>` (percent-encoded in the URL).
- `GET /state/<name>?key_json=<json>`: the state of a key that is not a string: the key as
  JSON, arrays standing for tuples (`key_json=42`, `key_json=["eu",7]`).
- `GET /state/<name>?prefix=<p>&limit=<n>`: up to `n` string keys starting with `p` (all keys
  when `p` is empty; `n` from 1 to 1000, by default 100), with their states.

Every answer is JSON and names the batch it is as of (`batch_time_ms`, the last completed one).
A state is JSON where it can be (tuples become arrays); otherwise `value` is its `repr` and
`encoding` says so. 404: no queryable state of that name (the names are never listed), or no
such key (the answer still names the batch). 503: recovering, no completed batch yet, or the
query timed out. 400: a query that means nothing. This module decides the answers and knows
nothing of HTTP framing (`service.observe.http` serves them).
"""

from __future__ import annotations

import json
import math
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import unquote

from service.graph.queryable import (
    DEFAULT_LIMIT,
    MAX_LIMIT,
    BadQuery,
    Found,
    NotQueryable,
    QueryUnavailable,
    Scanned,
    check_limit,
)

PREFIX = "/state/"
Answer = tuple[int, dict[str, Any]]


class StateQueries(Protocol):
    """What the routes ask of the graph (`service.graph.queryable.QueryableStates`)."""

    def lookup(self, stream: str, key: Hashable) -> Found: ...

    def scan(self, stream: str, prefix: str, limit: int = DEFAULT_LIMIT) -> Scanned: ...


@dataclass(frozen=True)
class Lookup:
    """`GET /state/<stream>/<key>` (a string key) or `/state/<stream>?key_json=...` (any key
    JSON can write; an array stands for a tuple): one key's state."""

    stream: str
    key: Hashable


@dataclass(frozen=True)
class Scan:
    """`GET /state/<stream>?prefix=...&limit=...`: string keys starting with `prefix`."""

    stream: str
    prefix: str
    limit: int


def parse_state_path(path: str, query: dict[str, str]) -> Lookup | Scan:
    """The query a `/state/...` request asks (`path` as sent, percent-encoded).

    >>> parse_state_path("/state/totals/a%2Fb", {})
    Lookup(stream='totals', key='a/b')
    >>> parse_state_path("/state/totals", {"key_json": '["eu", 7]'})
    Lookup(stream='totals', key=('eu', 7))
    >>> parse_state_path("/state/totals", {"prefix": "ab", "limit": "5"})
    Scan(stream='totals', prefix='ab', limit=5)
    """
    stream, slash, raw_key = path.removeprefix(PREFIX).partition("/")
    stream = unquote(stream)
    if not stream:
        msg = "name the state: /state/<name>/<key>, or /state/<name>?prefix=<p>&limit=<n>"
        raise BadQuery(msg)
    forms = [form for form in ("key_json", "prefix") if form in query]
    if slash:
        forms.insert(0, "a key in the path")
    if len(forms) != 1:
        msg = (
            "ask for one thing: a key in the path (/state/<name>/<key>), ?key_json=<json>, or "
            f"?prefix=<p>&limit=<n>; got {', '.join(forms) or 'none of them'}"
        )
        raise BadQuery(msg)
    if slash:
        return Lookup(stream, unquote(raw_key))
    if "key_json" in query:
        return Lookup(stream, json_key(query["key_json"]))
    return Scan(stream, query["prefix"], parse_limit(query.get("limit")))


def json_key(text: str) -> Hashable:
    """A key given as JSON: arrays become tuples (a list cannot be a key); objects refused.

    >>> json_key('[1, ["a", null]]')
    (1, ('a', None))
    """
    try:
        value = json.loads(text)
    except ValueError as error:
        msg = f"key_json is not JSON: {error}"
        raise BadQuery(msg) from None
    return _hashable(value)


def _hashable(value: Any) -> Hashable:
    if isinstance(value, list):
        return tuple(_hashable(item) for item in value)
    if isinstance(value, dict):
        msg = "key_json: an object cannot be a key; use a string, number, array or null"
        raise BadQuery(msg)
    if isinstance(value, float) and not math.isfinite(value):
        msg = "key_json: NaN and infinities cannot be looked up"
        raise BadQuery(msg)
    return value  # type: ignore[no-any-return]


def parse_limit(text: str | None) -> int:
    """`limit`: 1 to `MAX_LIMIT`, `DEFAULT_LIMIT` when left out.

    >>> parse_limit(None), parse_limit("7")
    (100, 7)
    """
    if text is None:
        return DEFAULT_LIMIT
    if not text.strip().isdigit():
        msg = f"limit must be a whole number between 1 and {MAX_LIMIT}, got {text!r}"
        raise BadQuery(msg)
    return check_limit(int(text))


def encoded(value: Any) -> tuple[Any, str]:
    """`value` as JSON (`"json"`), or its `repr` when JSON has no form for it (`"repr"`).

    >>> encoded((1, "a")), encoded({"n": 2.5})
    (([1, 'a'], 'json'), ({'n': 2.5}, 'json'))
    >>> encoded({1, 2}), encoded(float("nan")), encoded(b"x")
    (('{1, 2}', 'repr'), ('nan', 'repr'), ("b'x'", 'repr'))
    """
    try:
        return json.loads(json.dumps(value, allow_nan=False)), "json"
    except (TypeError, ValueError):
        return repr(value), "repr"


def found_answer(found: Found) -> Answer:
    key, _ = encoded(found.key)
    document: dict[str, Any] = {
        "stream": found.stream,
        "key": key,
        "batch_time_ms": found.batch_time,
    }
    if not found.found:
        return 404, {**document, "error": "no such key in the state as of this batch"}
    value, encoding = encoded(found.value)
    return 200, {**document, "value": value, "encoding": encoding}


def scanned_answer(scanned: Scanned) -> Answer:
    entries = []
    for key, state in scanned.entries:
        value, encoding = encoded(state)
        entries.append({"key": key, "value": value, "encoding": encoding})
    return 200, {
        "stream": scanned.stream,
        "prefix": scanned.prefix,
        "limit": scanned.limit,
        "batch_time_ms": scanned.batch_time,
        "entries": entries,
        "more": scanned.more,
    }


def answer(queries: StateQueries | None, method: str, path: str, query: dict[str, str]) -> Answer:
    """The status and JSON document answering a request to `/state/...`."""
    if method not in ("GET", "HEAD"):
        return 405, {"error": "state queries are GET requests"}
    if queries is None:
        return 503, {"error": "the driver is starting; state queries are answered once it runs"}
    try:
        asked = parse_state_path(path, query)
        if isinstance(asked, Lookup):
            return found_answer(queries.lookup(asked.stream, asked.key))
        return scanned_answer(queries.scan(asked.stream, asked.prefix, asked.limit))
    except BadQuery as error:
        return 400, {"error": str(error)}
    except NotQueryable as error:
        return 404, {"error": str(error)}
    except QueryUnavailable as error:
        return 503, {"error": str(error)}
