"""A partition read through PySpark's own serializer ends at the end-of-data marker, and a cut
raises once the guard is installed (service/graph/partition_input.py; the kill itself:
tests/spark/test_killed_task_input.py)."""

from __future__ import annotations

import io
import pickle
from collections.abc import Iterator

import pytest
from pyspark.serializers import AutoBatchedSerializer, CPickleSerializer, SpecialLengths, write_int

from service.errors import PartitionInputCut
from service.graph.partition_input import GuardedInput, lenient_frames, strict_frames

ROWS = [(f"w{n}", n) for n in range(5_000)]


@pytest.fixture(autouse=True)
def lenient_after() -> Iterator[None]:
    yield
    lenient_frames()


def frames(rows: list[tuple[str, int]], end_marker: bool = True) -> bytes:
    """`rows` as the executor sends them to a worker: batched pickle frames, then the marker."""
    out = io.BytesIO()
    AutoBatchedSerializer(CPickleSerializer()).dump_stream(iter(rows), out)
    if end_marker:
        write_int(SpecialLengths.END_OF_DATA_SECTION, out)
    return out.getvalue()


def read(data: bytes) -> list[tuple[str, int]]:
    return list(AutoBatchedSerializer(CPickleSerializer()).load_stream(io.BytesIO(data)))


def test_a_whole_partition_reads_the_same_with_the_guard() -> None:
    data = frames(ROWS)
    assert read(data) == ROWS
    strict_frames()
    assert read(data) == ROWS


@pytest.mark.parametrize("cut_at", ["before the marker", "inside a frame", "before any frame"])
def test_a_cut_partition_ends_quietly_without_the_guard_and_raises_with_it(cut_at: str) -> None:
    whole = frames(ROWS, end_marker=False)
    data = {"before the marker": whole, "inside a frame": whole[:-100], "before any frame": b""}
    cut = data[cut_at]
    lenient = read(cut)
    assert lenient == ROWS[: len(lenient)]  # PySpark alone: a prefix, ending like a whole one
    strict_frames()
    with pytest.raises(PartitionInputCut, match="without the executor's end-of-data marker"):
        read(cut)


def test_unpickling_a_guarded_task_function_installs_the_guard() -> None:
    guarded = GuardedInput(enumerate_rows)
    assert read(frames(ROWS, end_marker=False)) == ROWS  # not installed by making it
    copy = pickle.loads(pickle.dumps(guarded))  # what a worker does with a task's function
    assert list(copy(3, iter("ab"))) == [(3, "a"), (3, "b")]
    with pytest.raises(PartitionInputCut):
        read(frames(ROWS, end_marker=False))


def enumerate_rows(index: int, rows: Iterator[str]) -> Iterator[tuple[int, str]]:
    return ((index, row) for row in rows)
