"""A JSON-lines body checked whole (`_plain_json_lines`) gets the answer the line-by-line check
gives: the same records, or the same refusal naming the same line. The whole-body check only
skips work; if it accepted a line the other refuses, the endpoint would acknowledge a record the
job cannot read."""

from __future__ import annotations

import json

from hypothesis import example, given, settings
from hypothesis import strategies as st

from service.ingest.parsing import (
    Limits,
    Records,
    RequestRejected,
    _json_lines,
    _json_lines_one_by_one,
)

LIMITS = Limits(max_records=6, max_record_bytes=1 << 20)

_documents = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=6)),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=6,
).map(lambda value: json.dumps(value).encode())
# Lines the line-by-line check treats with care: blank, padded, CR-ended, escaped, deep, bad.
_awkward_lines = st.sampled_from(
    [
        b"",
        b"   ",
        b'{"a": 1}\r',
        b'  {"a": 1}  ',
        b'"\\u00e9"',
        b'"\\u0000"',
        b'"\\ud800"',
        b"[" * 513 + b"]" * 513,
        b"[" * 300 + b"]" * 300,
        b"NaN",
        b"1e999",
        b'{"a": 1,}',
        b"\xef\xbb\xbf{}",
        b'"\xed\xa0\x80"',
        b"\x00",
        b"{",
    ]
)


def outcome(parse: object, body: bytes, key: bytes | None) -> object:
    try:
        records = parse(body, key, None, LIMITS)  # type: ignore[operator]
    except RequestRejected as refused:
        return (refused.status, refused.message, refused.record)
    assert isinstance(records, Records)
    return list(records), records.size


@settings(max_examples=800, deadline=None)
@given(
    lines=st.lists(st.one_of(_documents, _awkward_lines), max_size=8),
    trailing_newline=st.booleans(),
    key=st.one_of(st.none(), st.just(b"k")),
)
@example(lines=[b"[" * 300 + b"]" * 300, b"[" * 300 + b"]" * 300], trailing_newline=True, key=None)
@example(lines=[b"1"] * 7, trailing_newline=True, key=None)
def test_the_whole_body_check_answers_as_the_line_by_line_one(
    lines: list[bytes], trailing_newline: bool, key: bytes | None
) -> None:
    body = b"\n".join(lines) + (b"\n" if trailing_newline else b"")
    assert outcome(_json_lines, body, key) == outcome(_json_lines_one_by_one, body, key)
