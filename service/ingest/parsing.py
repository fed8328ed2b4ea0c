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
from collections.abc import Mapping
from dataclasses import dataclass
from typing import NamedTuple

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
    # A tuple, not a dataclass: a request makes one per record, and a frozen dataclass's
    # __init__ cost more than checking the record's JSON.
    key: bytes | None
    value: bytes


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
) -> list[Record]:
    """The request's records, or `RequestRejected` saying what is wrong and where. `decoder` is
    the source's (its codec, key codec and parse function): every record must pass it."""
    kind = media_type(content_type)
    key, key_field = query.get("key"), query.get("key_field")
    if key is not None and key_field is not None:
        raise RequestRejected(400, "give ?key= or ?key_field=, not both")
    if kind in JSON_LINES_TYPES:
        records = _json_lines(body, key, key_field, limits)
    elif kind == JSON_TYPE:
        records = [_json_record(body, key, key_field, "the body")]
    elif kind in RAW_TYPES:
        if key_field is not None:
            raise RequestRejected(400, f"?key_field= needs JSON records; {kind} bodies are bytes")
        records = [Record(_encode_key(key), body)]
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


_JSON_KINDS = frozenset({*JSON_LINES_TYPES, JSON_TYPE})
# Source decoders that accept whatever passed the JSON check above (`check_json` and
# `decode_json` give one verdict; JSON text is UTF-8): running them again would change nothing.
# None of them runs a job's code or a schema, so parsing with them takes about 1 µs a record.
PLAIN_DECODERS: tuple[Codec, ...] = (decode_bytes, decode_utf8, decode_json)


def media_type(content_type: str | None) -> str:
    """`application/json; charset=utf-8` -> `application/json`."""
    return (content_type or "").split(";", 1)[0].strip().lower()


def _json_lines(
    body: bytes, key: str | None, key_field: str | None, limits: Limits
) -> list[Record]:
    # The endpoint's work per record is mostly here, so the common case (no ?key_field=, whose
    # records need only a verdict) stays a tight loop, and what holds for the whole body (no
    # `\u` escape, shallow) is found once, not per line.
    storable = plainly_storable(body)
    encoded_key = _encode_key(key)
    records: list[Record] = []
    for number, line in enumerate(body.split(b"\n"), start=1):
        line = line.rstrip(b"\r")
        if not line or line.isspace():  # a blank line (isspace() copies nothing)
            continue
        if len(records) == limits.max_records:
            msg = f"more than {limits.max_records} records in one request; split it"
            raise RequestRejected(413, msg)
        if key_field is None:
            _check_line(line, number, len(records) + 1, storable)
            records.append(Record(encoded_key, line))
        else:
            records.append(_json_record(line, key, key_field, f"line {number}", len(records) + 1))
    return records


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


def _check_sizes(records: list[Record], limits: Limits) -> None:
    for index, record in enumerate(records):
        size = len(record.value) + len(record.key or b"")
        if size > limits.max_record_bytes:
            msg = (
                f"record {index + 1} is {size} bytes (key and value); at most "
                f"{limits.max_record_bytes} are accepted"
            )
            raise RequestRejected(413, msg, index + 1)
    if len(records) > limits.max_records:
        msg = f"more than {limits.max_records} records in one request; split it"
        raise RequestRejected(413, msg)


def _check_decodes(records: list[Record], decoder: Codec) -> None:
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
