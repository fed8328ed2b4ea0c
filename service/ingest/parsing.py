"""What a POST /ingest/<source> request says: its records, its idempotency key, its fingerprint.

Bodies, by Content-Type:

- ``application/x-ndjson`` (or ``application/jsonl``, ``application/json-lines``): one record per
  non-empty line; each line must be a JSON document and becomes the record's value as sent.
- ``application/json``: the whole body is one JSON document, one record.
- ``application/octet-stream`` or ``text/plain``: the whole body is one record, bytes as sent.

Keys (optional): ``?key=<text>`` gives every record of the request that key;
``?key_field=<name>`` takes each JSON record's key from its top-level field ``name`` (a string is
used as it is, anything else as its JSON text). Without either, records have no key.

Every record must also decode with its source's codec and ``parse`` function (the same `Codec`
object the job reads with, `connectors.codecs`): a body that is not what its Content-Type says is
400, a record the source's decoder refuses is 422; both name the first bad record (counted from
1). Everything is checked before anything is written, so a refused request writes nothing, and
nothing acknowledged can fail the job's decoding (docs/architecture.md, "Ingest").
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import deque
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from itertools import repeat
from typing import NamedTuple

import orjson

from connectors.codecs import (
    Codec,
    DecodeError,
    check_json,
    decode_bytes,
    decode_json,
    decode_utf8,
    plainly_storable,
)

JSON_LINES_TYPES = frozenset(
    {"application/x-ndjson", "application/jsonl", "application/json-lines", "application/ndjson"}
)
JSON_TYPE = "application/json"
RAW_TYPES = frozenset({"application/octet-stream", "text/plain"})
ACCEPTED_TYPES = sorted({*JSON_LINES_TYPES, JSON_TYPE, *RAW_TYPES})
# Visible ASCII, as in Stripe's and the IETF draft's Idempotency-Key: safe in logs and headers.
_IDEMPOTENCY_KEY = re.compile(r"[!-~]{1,255}")
IDEMPOTENCY_HEADER = "Idempotency-Key"


class RequestRejected(Exception):
    """A request that cannot be written as it is; `status` is the HTTP answer (400, 413, 415,
    422); `record` the first bad record's number (from 1) when one record is at fault."""

    def __init__(self, status: int, message: str, record: int | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.record = record


class Record(NamedTuple):
    """One record of a request, as `Records` yields them (its paths that are not per record)."""

    key: bytes | None
    value: bytes


class Records:
    """A request's records: their values, and their Kafka keys, one for all (`key`, from
    ``?key=``) or one each (`keys`, from ``?key_field=``). Lists, not a tuple per record: a
    request's records are made, measured and produced hundreds at a time, and an object per
    record cost the endpoint more than checking the record's JSON."""

    __slots__ = ("key", "keys", "size", "values")

    def __init__(
        self, values: list[bytes], key: bytes | None = None, keys: list[bytes] | None = None
    ) -> None:
        self.values = values
        self.key = key
        self.keys = keys
        self.size = sum(map(len, values)) + self._key_bytes()
        """Bytes of its records' keys and values (a key shared by all counts once per record)."""

    def _key_bytes(self) -> int:
        if self.keys is not None:
            return sum(map(len, self.keys))
        return len(self.key or b"") * len(self.values)

    def __len__(self) -> int:
        return len(self.values)

    def __iter__(self) -> Iterator[Record]:
        keys = repeat(self.key) if self.keys is None else self.keys
        return map(Record._make, zip(keys, self.values, strict=False))

    def __repr__(self) -> str:
        return f"Records({list(self)!r})"


@dataclass(frozen=True)
class Limits:
    max_records: int
    max_record_bytes: int


def parse_records(
    content_type: str | None,
    query: Mapping[str, str],
    body: bytes,
    limits: Limits,
    decoder: Codec = decode_bytes,
) -> Records:
    """The request's records, or `RequestRejected` saying what is wrong and where. `decoder` is
    the source's (its codec, key codec and parse function): every record must pass it."""
    kind = media_type(content_type)
    key, key_field = query.get("key"), query.get("key_field")
    if key is not None and key_field is not None:
        raise RequestRejected(400, "give ?key= or ?key_field=, not both")
    if kind in JSON_LINES_TYPES:
        records = _json_lines(body, _encode_key(key), key_field, limits)
    elif kind == JSON_TYPE:
        records = _one(_json_record(body, key, key_field, "the body"))
    elif kind in RAW_TYPES:
        if key_field is not None:
            raise RequestRejected(400, f"?key_field= needs JSON records; {kind} bodies are bytes")
        records = Records([body], _encode_key(key))
    else:
        msg = (
            f"Content-Type {content_type or '(none)'} is not accepted; use one of "
            f"{', '.join(ACCEPTED_TYPES)}"
        )
        raise RequestRejected(415, msg)
    if not records:
        raise RequestRejected(400, "the request holds no record; send at least one")
    _check_sizes(records, limits)
    if not (kind in _JSON_KINDS and decoder in PLAIN_DECODERS):
        _check_decodes(records, decoder)
    return records


def _one(record: Record) -> Records:
    return Records([record.value], record.key)


_JSON_KINDS = frozenset({*JSON_LINES_TYPES, JSON_TYPE})
# Source decoders that accept whatever passed the JSON check above (`check_json` and
# `decode_json` give one verdict; JSON text is UTF-8): running them again would change nothing.
# None of them runs a job's code or a schema, so parsing with them takes about 1 µs a record.
PLAIN_DECODERS: tuple[Codec, ...] = (decode_bytes, decode_utf8, decode_json)


def media_type(content_type: str | None) -> str:
    """`application/json; charset=utf-8` -> `application/json`."""
    return (content_type or "").split(";", 1)[0].strip().lower()


def _json_lines(body: bytes, key: bytes | None, key_field: str | None, limits: Limits) -> Records:
    if key_field is None:
        values = _plain_json_lines(body, limits.max_records)
        if values is not None:
            return Records(values, key)
    return _json_lines_one_by_one(body, key, key_field, limits)


def _plain_json_lines(body: bytes, max_records: int) -> list[bytes] | None:
    """The body's lines when each is a JSON document orjson accepts and none needs more care
    (no blank line, no CR, no `\\u` escape, not too deep), so that the line-by-line check would
    accept them all as they are; else None. The endpoint's work per record was mostly the
    line-by-line loop, and most bodies are like this: here nothing runs per line in Python."""
    if b"\r" in body:
        return None
    lines = body.split(b"\n")
    if lines[-1] == b"":
        lines.pop()  # the last line's newline
    if len(lines) > max_records or not _plainly_storable_lines(body, lines):
        return None
    try:
        deque(map(orjson.loads, lines), maxlen=0)  # each line's verdict; an empty line fails
    except orjson.JSONDecodeError:
        return None
    return lines


def _plainly_storable_lines(body: bytes, lines: list[bytes]) -> bool:
    """`plainly_storable` of every line: found once for the whole body when it can be."""
    return plainly_storable(body) or all(map(plainly_storable, lines))


def _json_lines_one_by_one(
    body: bytes, key: bytes | None, key_field: str | None, limits: Limits
) -> Records:
    """Each line judged alone, blank lines skipped, the first bad one named; with
    ``?key_field=``, each record's key taken from its document."""
    storable = plainly_storable(body)
    values: list[bytes] = []
    keys: list[bytes] = []
    for number, line in enumerate(body.split(b"\n"), start=1):
        line = line.rstrip(b"\r")
        if not line or line.isspace():  # a blank line (isspace() copies nothing)
            continue
        if len(values) == limits.max_records:
            msg = f"more than {limits.max_records} records in one request; split it"
            raise RequestRejected(413, msg)
        if key_field is None:
            _check_line(line, number, len(values) + 1, storable)
        else:
            record = _json_record(line, None, key_field, f"line {number}", len(values) + 1)
            keys.append(record.key or b"")
        values.append(line)
    return Records(values, key) if key_field is None else Records(values, keys=keys)


def _check_line(line: bytes, number: int, record: int, storable: bool) -> None:
    try:
        check_json(line, known_storable=storable)
    except DecodeError as error:
        msg = f"line {number} is not valid JSON: {error.reason}"
        raise RequestRejected(400, msg, record) from None


def _json_record(
    text: bytes, key: str | None, key_field: str | None, where: str, number: int = 1
) -> Record:
    try:
        if key_field is None:  # the value is not needed, only the verdict
            check_json(text)
            return Record(_encode_key(key), text)
        document = decode_json(text)
    except DecodeError as error:
        raise RequestRejected(400, f"{where} is not valid JSON: {error.reason}", number) from None
    if not isinstance(document, dict) or document.get(key_field) is None:
        msg = f"{where} has no field {key_field!r} to take the record's key from (?key_field=)"
        raise RequestRejected(400, msg, number)
    field = document[key_field]
    return Record(field.encode() if isinstance(field, str) else json.dumps(field).encode(), text)


def _encode_key(key: str | None) -> bytes | None:
    return None if key is None else key.encode()


def _check_sizes(records: Records, limits: Limits) -> None:
    if _largest(records) > limits.max_record_bytes:
        _refuse_largest(records, limits.max_record_bytes)
    if len(records) > limits.max_records:
        msg = f"more than {limits.max_records} records in one request; split it"
        raise RequestRejected(413, msg)


def _refuse_largest(records: Records, limit: int) -> None:
    """Names the first record over the limit (looked for only once one is known to be)."""
    for index, record in enumerate(records):
        size = len(record.value) + len(record.key or b"")
        if size > limit:
            msg = (
                f"record {index + 1} is {size} bytes (key and value); at most {limit} are accepted"
            )
            raise RequestRejected(413, msg, index + 1)


def _largest(records: Records) -> int:
    """Bytes of the largest record's key and value."""
    if records.keys is not None:
        return max(map(sum, zip(map(len, records.keys), map(len, records.values), strict=True)))
    return max(map(len, records.values)) + len(records.key or b"")


def _check_decodes(records: Records, decoder: Codec) -> None:
    """Each record through the source's decoder, as the job's reads will take it."""
    key_codec: Codec | None = getattr(decoder, "key_codec", None)
    for index, record in enumerate(records):
        try:
            decoder(record.value)
            if key_codec is not None:
                _decode_key(key_codec, record.key)
        except DecodeError as error:
            msg = f"record {index + 1} is refused by the source's decoder: {error.reason}"
            raise RequestRejected(422, msg, index + 1) from None


def _decode_key(key_codec: Codec, key: bytes | None) -> None:
    try:
        key_codec(key)
    except DecodeError as error:
        msg = f"key: {error.reason}"
        raise DecodeError(msg) from None


def checked_idempotency_key(value: str | None) -> str | None:
    """The Idempotency-Key header's value, checked; None when the client sent none."""
    if value is None:
        return None
    if not _IDEMPOTENCY_KEY.fullmatch(value):
        msg = (
            f"{IDEMPOTENCY_HEADER} must be 1 to 255 visible ASCII characters (no spaces); "
            f"found {len(value)} characters"
        )
        raise RequestRejected(400, msg)
    return value


def fingerprint(
    source: str, content_type: str | None, query: Mapping[str, str], body: bytes
) -> str:
    """What makes two requests the same: a retry must match the first use of its key."""
    digest = hashlib.sha256()
    for part in (source, media_type(content_type), query.get("key"), query.get("key_field")):
        digest.update(b"\0" if part is None else part.encode() + b"\1")
    digest.update(body)
    return digest.hexdigest()[:32]
