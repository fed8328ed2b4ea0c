"""Value codecs: selection by name, decoding, and short reasons for what cannot be decoded."""

from __future__ import annotations

import pytest

from connectors.codecs import DecodeError, codec_names, get_codec
from service.errors import ConfigError, DStreamsError


def test_known_codecs_and_aliases() -> None:
    assert codec_names() == ["bytes", "json", "utf-8"]
    assert get_codec("UTF8") is get_codec("utf-8")
    assert get_codec(" Json ") is get_codec("json")


def test_unknown_codec_names_the_known_ones() -> None:
    with pytest.raises(ConfigError, match="'avro'.*bytes, json, utf-8"):
        get_codec("avro")


@pytest.mark.parametrize("name", ["bytes", "utf-8", "json"])
def test_tombstones_decode_to_none(name: str) -> None:
    assert get_codec(name)(None) is None


def test_bytes_passes_through() -> None:
    assert get_codec("bytes")(b"\xff\x00") == b"\xff\x00"


def test_utf8() -> None:
    assert get_codec("utf-8")("zürich".encode()) == "zürich"
    assert get_codec("utf-8")(b"") == ""
    with pytest.raises(DecodeError, match="not UTF-8: invalid start byte at byte 1"):
        get_codec("utf-8")(b"a\xff")


@pytest.mark.parametrize(
    ("raw", "value"),
    [
        (b'{"word": "k\\u00e4se", "n": 2}', {"word": "käse", "n": 2}),
        (b"[1, 2.5, null]", [1, 2.5, None]),
        (b'"text"', "text"),
        (b" 42 ", 42),
    ],
)
def test_json(raw: bytes, value: object) -> None:
    assert get_codec("json")(raw) == value


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (b"", "invalid JSON: Expecting value at line 1 column 1"),
        (b'{"a": 1', "invalid JSON: Expecting ',' delimiter at line 1 column 8"),
        (b"\xfe{}", "not UTF-8"),
        (b"[" * 100_000, "nested too deeply"),
    ],
)
def test_json_failures_carry_a_short_reason(raw: bytes, reason: str) -> None:
    with pytest.raises(DecodeError) as caught:
        get_codec("json")(raw)
    assert reason in caught.value.reason
    assert isinstance(caught.value, DStreamsError)


def test_reasons_are_bounded() -> None:
    assert len(DecodeError("x" * 10_000).reason) == 200


def test_parsing_codec_turns_user_errors_into_decode_errors() -> None:
    from connectors.codecs import ParsingCodec, resolve_codec

    def price_of(event: dict[str, int]) -> int:
        return event["price"]

    codec = ParsingCodec("json", price_of)
    assert codec(b'{"price": 3}') == 3
    with pytest.raises(DecodeError, match=r"^\[KeyError\] 'price'"):
        codec(b'{"cost": 3}')
    assert resolve_codec(codec) is codec
    assert resolve_codec("utf-8")(b"x") == "x"


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (b"\xef\xbb\xbf{}", "byte-order mark"),
        ('{"a": 1}'.encode("utf-16"), "not UTF-8"),
        ('{"a": 1}'.encode("utf-32"), "not UTF-8"),
        (b"[NaN]", "NaN is not a JSON number"),
        (b'{"x": -Infinity}', "-Infinity is not a JSON number"),
        (b"1e999", "1e999 overflows a double"),
        (b"9" * 5000, "digits"),
        (b'"\\ud800"', "lone surrogate"),
        (b'{"\\udc00": 1}', "lone surrogate"),
        (b'["a\\u0000b"]', "NUL"),
        (b"[" * 600 + b"]" * 600, "nested deeper than 512"),
    ],
)
def test_json_refuses_what_strict_readers_and_sinks_refuse(raw: bytes, reason: str) -> None:
    with pytest.raises(DecodeError) as caught:
        get_codec("json")(raw)
    assert reason in caught.value.reason


def test_json_keeps_surrogate_pairs_and_nesting_within_the_limit() -> None:
    assert get_codec("json")(b'["\\ud83d\\ude00"]') == ["\U0001f600"]
    assert get_codec("json")(b"[" * 500 + b"]" * 500) is not None
