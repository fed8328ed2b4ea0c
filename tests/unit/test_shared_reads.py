"""How often a batch would compute a stream's RDD: what decides whether a source's read of the
batch is persisted, so that Kafka is read (and its records counted) once per batch."""

from __future__ import annotations

from service.graph.context import StreamingContext
from service.graph.functions import add, pair_with_one
from sinks.memory import MemorySink


def context() -> StreamingContext:
    return StreamingContext(None, "app", 1000, default_partitions=2)


def test_one_output_computes_the_source_once() -> None:
    ctx = context()
    source = ctx.queue_stream([["a"]])
    source.map(pair_with_one).reduce_by_key(add).write("counts", MemorySink())
    assert source.computations_per_batch() == 1


def test_each_output_reading_a_source_computes_it_again() -> None:
    ctx = context()
    source = ctx.queue_stream([["a"]])
    source.map(pair_with_one).reduce_by_key(add).write("counts", MemorySink())
    source.write("raw", MemorySink())
    source.foreach_batch(lambda _rdd, _t: None)
    assert source.computations_per_batch() == 3


def test_a_union_of_two_branches_of_a_source_computes_it_twice() -> None:
    ctx = context()
    source = ctx.queue_stream([["a"]])
    source.map(str.upper).union(source.filter(bool)).write("both", MemorySink())
    assert source.computations_per_batch() == 2


def test_a_stream_without_outputs_is_not_computed() -> None:
    ctx = context()
    source = ctx.queue_stream([["a"]])
    source.map(str.upper)
    assert source.computations_per_batch() == 0


def test_a_window_computes_its_parent_once_however_many_outputs_read_it() -> None:
    ctx = context()
    source = ctx.queue_stream([["a"]])
    windows = source.window(2000, 1000)
    windows.write("one", MemorySink())
    windows.map(str.upper).write("two", MemorySink())
    assert source.computations_per_batch() == 1
    source.write("raw", MemorySink())
    assert source.computations_per_batch() == 2
