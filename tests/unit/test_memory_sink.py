"""The in-memory test sink refuses non-deterministic rewrites and skips identical ones."""

from __future__ import annotations

import pytest

from service.errors import SinkError
from sinks.base import BatchKey
from sinks.memory import MemorySink

KEY = BatchKey("app", "out", 1000, 0)


def test_identical_rewrite_is_skipped_and_counted() -> None:
    sink = MemorySink()
    sink.write(KEY, [1, 2])
    result = sink.write(KEY, [2, 1])
    assert result.skipped
    assert sink.duplicates_suppressed == 1
    assert sink.batch_rows("out", 1000) == [1, 2]


def test_different_rewrite_fails_loudly() -> None:
    sink = MemorySink()
    sink.write(KEY, [1, 2])
    with pytest.raises(SinkError, match="written twice with different rows"):
        sink.write(KEY, [1, 3])


def test_batches_in_order_with_empty_ones() -> None:
    sink = MemorySink()
    sink.write(BatchKey("app", "out", 2000, 0), ["b"])
    sink.commit("app", "out", 2000, 1)
    sink.commit("app", "out", 1000, 0)
    assert sink.batches("out") == [[], ["b"]]
