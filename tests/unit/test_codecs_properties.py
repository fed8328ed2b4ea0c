"""`check_json` gives `decode_json`'s verdict on any input: it only skips work, never changes
what the ingest endpoint accepts (an accepted record the job refuses would stop the job)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from connectors.codecs import DecodeError, check_json, decode_json


def verdict(check: Callable[[bytes], Any], raw: bytes) -> str | None:
    """None when `check` accepts `raw`, else its reason."""
    try:
        check(raw)
    except DecodeError as error:
        return error.reason
    return None


# Strings with what the strict rules are about: NUL, lone surrogates, controls, non-ASCII.
_awkward_text = st.text(
    alphabet=st.one_of(
        st.sampled_from(["\x00", "\ud800", "\udfff", "\t", "\x7f", "\ufeff", '"', "\\", "é"]),
        st.characters(codec="utf-8", exclude_categories=["Cs"]),
    ),
    max_size=12,
)
_values = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(min_value=-(10**400), max_value=10**400),
        st.floats(allow_nan=True, allow_infinity=True),
        _awkward_text,
    ),
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(_awkward_text, inner, max_size=4)
    ),
    max_leaves=12,
)


def _encoded(value: Any, ascii_only: bool) -> bytes:
    text = json.dumps(value, ensure_ascii=ascii_only, allow_nan=True)
    return text.encode("utf-8", "surrogatepass")  # lone surrogates as the (invalid) bytes


@settings(max_examples=600, deadline=None)
@given(
    value=_values, ascii_only=st.booleans(), cut=st.integers(0, 200), noise=st.binary(max_size=3)
)
@example(value=1e308, ascii_only=True, cut=0, noise=b"")
def test_json_documents_and_their_corruptions_get_the_same_verdict(
    value: Any, ascii_only: bool, cut: int, noise: bytes
) -> None:
    raw = _encoded(value, ascii_only)
    assert verdict(check_json, raw) == verdict(decode_json, raw)
    corrupted = raw[:cut] + noise + raw[cut + len(noise) :]
    assert verdict(check_json, corrupted) == verdict(decode_json, corrupted)


@settings(max_examples=600, deadline=None)
@given(raw=st.binary(max_size=40))
def test_arbitrary_bytes_get_the_same_verdict(raw: bytes) -> None:
    assert verdict(check_json, raw) == verdict(decode_json, raw)


@pytest.mark.parametrize(
    "raw",
    [
        b"\xef\xbb\xbf{}",
        '{"a": 1}'.encode("utf-16"),
        b"[NaN]",
        b"1e999",
        b"-1E400",
        b"9" * 5000,
        b'"\\ud800"',
        b'["a\\u0000b"]',
        b'"\xed\xa0\x80"',
        b"[" * 513 + b"]" * 513,
        b'{"a": 1,}',
        b"",
        b" ",
    ],
)
def test_refusals_name_the_same_reason(raw: bytes) -> None:
    reason = verdict(check_json, raw)
    assert reason is not None
    assert reason == verdict(decode_json, raw)


def test_accepts_what_the_job_accepts() -> None:
    for raw in (b'{"id": 1, "payload": "x"}', b"[" * 512 + b"]" * 512, b'"\\ud83d\\ude00"'):
        assert verdict(check_json, raw) is None
        assert verdict(decode_json, raw) is None
