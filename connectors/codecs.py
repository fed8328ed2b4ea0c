"""Value decoders for Kafka records, chosen by name in the job config (`bytes`, `utf-8`, `json`).

Pure functions with no Kafka import, so they run on executors and in unit tests alike. A decoder
gets the raw value (`None` for a tombstone) and returns the decoded value or raises `DecodeError`;
the reader turns that into a dead-letter record instead of failing the batch.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from typing import Any

import orjson

from service.errors import ConfigError, DStreamsError

Codec = Callable[[bytes | None], Any]
"""Decodes one raw record value. `None` (a tombstone) decodes to `None` in every codec."""

# Reasons end up in logs and dead-letter headers; keep them bounded whatever the input was.
_MAX_REASON_CHARS = 200


class DecodeError(DStreamsError):
    """A record value could not be decoded; `reason` is short and safe to put in a header."""

    def __init__(self, reason: str) -> None:
        self.reason = reason[:_MAX_REASON_CHARS]
        super().__init__(self.reason)


def decode_bytes(raw: bytes | None) -> bytes | None:
    return raw


def decode_utf8(raw: bytes | None) -> str | None:
    if raw is None:
        return None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        msg = f"not UTF-8: {exc.reason} at byte {exc.start}"
        raise DecodeError(msg) from None


def decode_json(raw: bytes | None) -> Any:
    """Strict JSON text in UTF-8 (RFC 8259 as sinks can store it). An empty value is an error, not
    `None`: only tombstones are `None`.

    Refused besides malformed text: a byte-order mark, `NaN`/`Infinity` and numbers that overflow
    to them (`1e999`), lone surrogates and NUL in strings (PostgreSQL and strict encoders refuse
    them), and nesting deeper than `MAX_JSON_DEPTH`. The ingest endpoint checks records with
    `check_json`, which gives this function's verdict, so what it accepts the job decodes
    (docs/architecture.md, "Ingest").
    """
    if raw is None:
        return None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        msg = f"not UTF-8: {exc.reason} at byte {exc.start}"
        raise DecodeError(msg) from None
    if text.startswith("\ufeff"):
        msg = "invalid JSON: starts with a byte-order mark"
        raise DecodeError(msg)
    try:
        document = _DECODER.decode(text)
    except json.JSONDecodeError as exc:
        msg = f"invalid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
        raise DecodeError(msg) from None
    except RecursionError:
        # Deeply nested input exhausts the parser's stack; that is bad data, not a bug.
        msg = "invalid JSON: nested too deeply"
        raise DecodeError(msg) from None
    except ValueError as exc:  # NaN, an overflowing number, an integer of too many digits
        msg = f"invalid JSON: {exc}"
        raise DecodeError(msg) from None
    if _may_hold_unstorable(text):
        _check_json_strings(document)
    return document


def check_json(raw: bytes, *, known_storable: bool = False) -> None:
    """Raises `DecodeError` exactly when `decode_json(raw)` would, without keeping the value.

    The ingest endpoint checks every record it is sent; `decode_json` costs about ten times what
    orjson's parser does, which made it most of the endpoint's work per record. orjson is the
    first judge: what it accepts and `plainly_storable` clears, `decode_json` accepts too (both
    refuse byte-order marks, NaN, numbers that overflow, malformed UTF-8 and control characters;
    tests/unit/test_codecs_properties.py checks it). Anything else, `decode_json` judges, so the
    verdict and its message are always the job's. `known_storable`: `plainly_storable` was
    found true of something holding all of `raw` (a request's body), so it holds for `raw`."""
    if known_storable or plainly_storable(raw):
        try:
            orjson.loads(raw)
        except orjson.JSONDecodeError:
            pass
        else:
            return
    decode_json(raw)


def plainly_storable(raw: bytes) -> bool:
    """`_may_hold_unstorable` on the raw bytes, negated: no `\\u` escape, and fewer brackets
    than deep nesting needs. True of bytes, it is true of any part of them."""
    return b"\\u" not in raw and raw.count(b"[") + raw.count(b"{") <= MAX_JSON_DEPTH


def _may_hold_unstorable(text: str) -> bool:
    """False when the text alone shows that `_check_json_strings` would find nothing: NUL and
    lone surrogates reach a string only through a `\\u` escape (the decoder refuses raw control
    characters, and strict UTF-8 refuses encoded surrogates), and nesting deeper than
    `MAX_JSON_DEPTH` needs more brackets than that. Most records skip the walk."""
    return "\\u" in text or text.count("[") + text.count("{") > MAX_JSON_DEPTH


MAX_JSON_DEPTH = 512
"""Deepest nesting of arrays and objects a JSON value may have: recursive encoders (a sink's
`json.dumps`) stay far from Python's recursion limit."""
# NUL and UTF-16 surrogates (only lone ones survive decoding: pairs become one character).
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


def _refuse_constant(name: str) -> Any:
    msg = f"{name} is not a JSON number"
    raise ValueError(msg)


def _finite_float(text: str) -> float:
    number = float(text)
    if not math.isfinite(number):
        msg = f"{text[:20]} overflows a double"
        raise ValueError(msg)
    return number


# One decoder for every call: `json.loads` with hooks would build a new one per value.
_DECODER = json.JSONDecoder(parse_constant=_refuse_constant, parse_float=_finite_float)


def _check_json_strings(document: Any) -> None:
    """`DecodeError` for NUL or a lone surrogate in any string or key, or for nesting deeper than
    `MAX_JSON_DEPTH`; iterative, so no input can exhaust the stack here."""
    stack: list[tuple[Any, int]] = [(document, 0)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, str):
            if _UNSTORABLE.search(value):
                msg = "invalid JSON: a string holds NUL or a lone surrogate"
                raise DecodeError(msg)
        elif isinstance(value, list | dict):
            if depth >= MAX_JSON_DEPTH:
                msg = f"invalid JSON: nested deeper than {MAX_JSON_DEPTH}"
                raise DecodeError(msg)
            items = value if isinstance(value, list) else [*value.keys(), *value.values()]
            stack.extend((item, depth + 1) for item in items)


# Avro needs settings (a schema file or a registry), so it is not here: `connectors.avro` builds an
# `AvroDecoder` from config and the source passes that object where a codec name would go.
_CODECS: dict[str, Codec] = {
    "bytes": decode_bytes,
    "utf-8": decode_utf8,
    "json": decode_json,
}
_ALIASES = {"utf8": "utf-8", "string": "utf-8", "raw": "bytes"}


def codec_names() -> list[str]:
    return sorted(_CODECS)


def get_codec(name: str) -> Codec:
    """The decoder called `name` (case-insensitive); `ConfigError` naming the known ones if none."""
    key = name.strip().lower()
    key = _ALIASES.get(key, key)
    codec = _CODECS.get(key)
    if codec is None:
        msg = f"unknown value codec {name!r}; expected one of {', '.join(codec_names())}"
        raise ConfigError(msg)
    return codec


class KeyedCodec:
    """Decodes values with `value` and keys with `key` (the reader reads `key_codec`).

    A record whose key does not decode fails like one whose value does not, with a reason that
    starts with `key: `.
    """

    def __init__(self, value: str | Codec, key: str | Codec) -> None:
        self.value = value
        self.key_codec = resolve_codec(key)

    def __call__(self, raw: bytes | None) -> Any:
        return resolve_codec(self.value)(raw)


class ParsingCodec:
    """A codec followed by a user's per-record function, as one decoder.

    When the function raises, the record fails like an undecodable one (`DecodeError`, raw bytes
    kept), so a poison record goes to the dead letters instead of failing its batch over and over.
    The reason starts with the exception type in brackets, e.g. `[KeyError] 'price'`.
    """

    def __init__(self, codec: str | Codec, function: Callable[[Any], Any]) -> None:
        self.codec = codec
        self.function = function
        # Keys are decoded as the wrapped codec says.
        self.key_codec: Codec | None = getattr(codec, "key_codec", None)

    def __call__(self, raw: bytes | None) -> Any:
        value = resolve_codec(self.codec)(raw)
        try:
            return self.function(value)
        except Exception as exc:  # any failure of user code makes the record a dead letter
            reason = f"[{type(exc).__name__}] {exc}"
            raise DecodeError(reason) from exc


def resolve_codec(codec: str | Codec) -> Codec:
    """A codec by name, or a ready codec object (e.g. a `ParsingCodec`) as it is."""
    return get_codec(codec) if isinstance(codec, str) else codec
