"""Ingest request bodies: JSON lines, one JSON document or raw bytes, keys, limits, fingerprints."""

from __future__ import annotations

import pytest

from service.ingest.parsing import (
    Limits,
    Record,
    RequestRejected,
    checked_idempotency_key,
    fingerprint,
    parse_records,
)

LIMITS = Limits(max_records=3, max_record_bytes=40)
NDJSON = "application/x-ndjson"


def rejected(content_type: str | None, body: bytes, **query: str) -> RequestRejected:
    with pytest.raises(RequestRejected) as caught:
        parse_records(content_type, query, body, LIMITS)
    return caught.value


def test_json_lines_become_one_record_each_with_bytes_as_sent() -> None:
    body = b'{"id": 1}\r\n\n  \n{"id":2}\n'
    assert list(parse_records(NDJSON, {}, body, LIMITS)) == [
        Record(None, b'{"id": 1}'),
        Record(None, b'{"id":2}'),
    ]


def test_key_field_takes_each_records_key_from_its_json() -> None:
    body = b'{"user": "ann", "n": 1}\n{"user": 7}\n'
    records = parse_records(NDJSON + "; charset=utf-8", {"key_field": "user"}, body, LIMITS)
    assert [r.key for r in records] == [b"ann", b"7"]


def test_key_gives_every_record_the_same_key() -> None:
    records = parse_records(NDJSON, {"key": "k"}, b"1\n2\n", LIMITS)
    assert [r.key for r in records] == [b"k", b"k"]


def test_json_body_is_one_record_and_raw_bodies_are_bytes() -> None:
    assert list(parse_records("application/json", {}, b"[1, 2]", LIMITS)) == [(None, b"[1, 2]")]
    raw = parse_records("application/octet-stream", {"key": "k"}, b"\x00\xff", LIMITS)
    assert list(raw) == [Record(b"k", b"\x00\xff")]


def test_malformed_json_names_the_line() -> None:
    problem = rejected(NDJSON, b'{"id": 1}\n{"id": \n')
    assert problem.status == 400 and "line 2 is not valid JSON" in problem.message


def test_missing_key_field_names_the_line_and_the_field() -> None:
    problem = rejected(NDJSON, b'{"user": "a"}\n{"other": 1}\n', key_field="user")
    assert problem.status == 400 and "line 2" in problem.message and "'user'" in problem.message


def test_key_and_key_field_together_are_refused() -> None:
    assert rejected(NDJSON, b"1\n", key="a", key_field="b").status == 400


def test_key_field_on_raw_bytes_is_refused() -> None:
    assert rejected("text/plain", b"x", key_field="id").status == 400


def test_empty_body_holds_no_record() -> None:
    problem = rejected(NDJSON, b"\n\n")
    assert problem.status == 400 and "no record" in problem.message


def test_unknown_content_type_is_415_listing_the_accepted_ones() -> None:
    problem = rejected("application/x-www-form-urlencoded", b"a=1")
    assert problem.status == 415 and "application/x-ndjson" in problem.message
    assert rejected(None, b"x").status == 415


def test_too_many_records_is_413() -> None:
    problem = rejected(NDJSON, b"1\n2\n3\n4\n")
    assert problem.status == 413 and "more than 3 records" in problem.message


def test_a_record_over_the_size_limit_is_413_and_counts_its_key() -> None:
    assert parse_records(NDJSON, {}, b'"' + b"a" * 38 + b'"', LIMITS)  # 40 bytes: accepted
    problem = rejected(NDJSON, b'"' + b"a" * 38 + b'"', key="k")
    assert problem.status == 413 and "record 1 is 41 bytes" in problem.message


@pytest.mark.parametrize("key", ["", "has space", "é", "x" * 256, "tab\tkey"])
def test_bad_idempotency_keys_are_refused(key: str) -> None:
    with pytest.raises(RequestRejected) as caught:
        checked_idempotency_key(key)
    assert caught.value.status == 400


def test_good_idempotency_keys_pass() -> None:
    assert checked_idempotency_key(None) is None
    assert checked_idempotency_key("order-42/batch:7") == "order-42/batch:7"
    assert checked_idempotency_key("x" * 255) == "x" * 255


def test_fingerprint_tells_requests_apart_by_what_they_write() -> None:
    base = fingerprint("lines", NDJSON, {}, b"1\n")
    assert base == fingerprint("lines", NDJSON + "; charset=utf-8", {}, b"1\n")
    others = {
        fingerprint("other", NDJSON, {}, b"1\n"),
        fingerprint("lines", "application/json", {}, b"1\n"),
        fingerprint("lines", NDJSON, {"key": "a"}, b"1\n"),
        fingerprint("lines", NDJSON, {"key_field": "a"}, b"1\n"),
        fingerprint("lines", NDJSON, {}, b"2\n"),
    }
    assert base not in others and len(others) == 5


@pytest.mark.parametrize(
    "line",
    [
        b"\xef\xbb\xbf{}",
        '{"a": 1}'.encode("utf-16"),
        b"[NaN]",
        b"1e999",
        b'"\\ud800"',
        b'"\\u0000"',
        b"[" * 100_000,
    ],
)
def test_json_records_are_checked_strictly_and_name_the_first_bad_one(line: bytes) -> None:
    problem = rejected(NDJSON, b'{"ok": 1}\n' + line + b"\n")
    assert problem.status == 400 and problem.record == 2 and "line 2" in problem.message


def test_every_record_must_pass_the_sources_decoder() -> None:
    from connectors.codecs import ParsingCodec, get_codec

    def price_of(event: dict[str, int]) -> int:
        return event["price"]

    decoder = ParsingCodec("json", price_of)
    body = b'{"price": 1}\n{"cost": 2}\n{"cost": 3}\n'
    with pytest.raises(RequestRejected) as caught:
        parse_records(NDJSON, {}, body, LIMITS, decoder)
    assert caught.value.status == 422 and caught.value.record == 2
    assert "[KeyError] 'price'" in caught.value.message
    with pytest.raises(RequestRejected) as raw:
        parse_records("application/octet-stream", {}, b"\xff", LIMITS, get_codec("utf-8"))
    assert raw.value.status == 422 and raw.value.record == 1
    assert list(parse_records(NDJSON, {}, b'{"price": 1}\n', LIMITS, decoder)) == [
        Record(None, b'{"price": 1}')
    ]


def test_keys_must_pass_the_sources_key_codec() -> None:
    from connectors.codecs import KeyedCodec

    decoder = KeyedCodec("json", "json")
    with pytest.raises(RequestRejected) as caught:
        parse_records(NDJSON, {"key": "not json"}, b"1\n", LIMITS, decoder)
    problem = caught.value
    assert problem.status == 422 and "key:" in problem.message
    assert list(parse_records(NDJSON, {"key": "7"}, b"1\n", LIMITS, decoder))[0].key == b"7"
