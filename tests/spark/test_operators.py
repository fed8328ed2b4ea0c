"""Golden tests: per-batch inputs in, per-batch outputs out, empty batches kept, on a real Spark."""

from __future__ import annotations

import operator
from typing import Any

import pytest

from service.graph import functions
from service.graph.context import StreamingContext
from service.testing import run_batches, run_contexts, run_two_streams
from sinks.memory import MemorySink

LINES = [["a b", "b c c"], [], ["c"], ["a a a"]]


def test_map(sc: Any) -> None:
    assert run_batches(sc, [[1, 2], [], [3]], lambda s: s.map(lambda x: x * 10)) == [
        [10, 20],
        [],
        [30],
    ]


def test_flat_map(sc: Any) -> None:
    assert run_batches(sc, LINES, lambda s: s.flat_map(str.split)) == [
        ["a", "b", "b", "c", "c"],
        [],
        ["c"],
        ["a", "a", "a"],
    ]


def test_filter(sc: Any) -> None:
    result = run_batches(sc, [[1, 2, 3, 4], [5], []], lambda s: s.filter(lambda x: x % 2 == 0))
    assert result == [[2, 4], [], []]


def test_map_partitions(sc: Any) -> None:
    result = run_batches(
        sc, [[1, 2, 3], [], [4]], lambda s: s.map_partitions(lambda rows: [sum(rows)])
    )
    # Partition sums differ with partitioning; their total must not.
    assert [sum(batch) for batch in result] == [6, 0, 4]


def test_map_values_and_flat_map_values(sc: Any) -> None:
    pairs = [[("a", 1), ("b", 2)], [], [("c", 3)]]
    assert run_batches(sc, pairs, lambda s: s.map_values(lambda v: v + 1)) == [
        [("a", 2), ("b", 3)],
        [],
        [("c", 4)],
    ]
    assert run_batches(sc, pairs, lambda s: s.flat_map_values(lambda v: range(v))) == [
        [("a", 0), ("b", 0), ("b", 1)],
        [],
        [("c", 0), ("c", 1), ("c", 2)],
    ]


def test_reduce_by_key(sc: Any) -> None:
    result = run_batches(
        sc,
        LINES,
        lambda s: s.flat_map(str.split).map(functions.pair_with_one).reduce_by_key(operator.add),
    )
    assert result == [[("a", 1), ("b", 2), ("c", 2)], [], [("c", 1)], [("a", 3)]]


def test_combine_by_key_averages(sc: Any) -> None:
    result = run_batches(
        sc,
        [[("a", 1), ("a", 3), ("b", 5)], []],
        lambda s: s.combine_by_key(
            lambda v: (v, 1),
            lambda acc, v: (acc[0] + v, acc[1] + 1),
            lambda x, y: (x[0] + y[0], x[1] + y[1]),
        ).map_values(lambda acc: acc[0] / acc[1]),
    )
    assert result == [[("a", 2.0), ("b", 5.0)], []]


def test_count_by_value(sc: Any) -> None:
    result = run_batches(sc, LINES, lambda s: s.flat_map(str.split).count_by_value())
    assert result == [[("a", 1), ("b", 2), ("c", 2)], [], [("c", 1)], [("a", 3)]]


def test_group_by_key(sc: Any) -> None:
    result = run_batches(
        sc,
        [[("a", 1), ("b", 2), ("a", 3)], []],
        lambda s: s.group_by_key().map_values(sorted),
    )
    assert result == [[("a", [1, 3]), ("b", [2])], []]


def test_count_emits_zero_for_empty_batches(sc: Any) -> None:
    assert run_batches(sc, [[1, 2, 3], [], [4]], lambda s: s.count()) == [[3], [0], [1]]


def test_repartition_keeps_rows_and_sets_partitions(sc: Any) -> None:
    ctx = StreamingContext(sc, "golden", 1000, 2)
    sink = MemorySink()
    ctx.queue_stream([list(range(10)), []]).repartition(3).write("out", sink)
    run_contexts(ctx, 2)
    assert sorted(sink.batches("out")[0]) == list(range(10))
    assert sink.batches("out")[1] == []
    assert {key.partition for key in sink.parts if key.batch_time == 1_000_000} == {0, 1, 2}


def test_transform_gets_batch_time_as_data(sc: Any) -> None:
    result = run_batches(
        sc,
        [[1], [], [2]],
        lambda s: s.transform(lambda rdd, t: rdd.map(lambda x: (t, x))),
    )
    assert result == [[(1_000_000, 1)], [], [(1_002_000, 2)]]


def test_union(sc: Any) -> None:
    result = run_two_streams(sc, [[1], [], [2]], [[10], [20], []], lambda a, b: a.union(b))
    assert result == [[1, 10], [20], [2]]


def test_join_and_left_outer_join(sc: Any) -> None:
    left = [[("a", 1), ("b", 2)], [("c", 3)], []]
    right = [[("a", "x")], [], [("d", "y")]]
    assert run_two_streams(sc, left, right, lambda a, b: a.join(b)) == [
        [("a", (1, "x"))],
        [],
        [],
    ]
    assert run_two_streams(sc, left, right, lambda a, b: a.left_outer_join(b)) == [
        [("a", (1, "x")), ("b", (2, None))],
        [("c", (3, None))],
        [],
    ]


def test_foreach_batch_sees_every_batch_with_its_time(sc: Any) -> None:
    seen: list[tuple[int, list[Any]]] = []
    ctx = StreamingContext(sc, "golden", 1000, 2)
    ctx.queue_stream([[1, 2], [], [3]]).foreach_batch(
        lambda rdd, t: seen.append((t, sorted(rdd.collect())))
    )
    run_contexts(ctx, 3)
    assert seen == [(1_000_000, [1, 2]), (1_001_000, []), (1_002_000, [3])]


def test_output_partitions_are_identical_on_rerun(sc: Any) -> None:
    """Same input, same graph: every (batch, partition) holds the same rows in a second run."""

    def parts_of_one_run() -> dict[Any, list[Any]]:
        ctx = StreamingContext(sc, "golden", 1000, 3)
        sink = MemorySink()
        words = ctx.queue_stream([["x y z w"] * 5, ["q r s"]]).flat_map(str.split)
        words.count_by_value().write("out", sink)
        run_contexts(ctx, 2)
        return {key: sorted(rows) for key, rows in sink.parts.items()}

    assert parts_of_one_run() == parts_of_one_run()


def test_graph_fingerprint_changes_with_partition_count(sc: Any) -> None:
    def fingerprint(partitions: int) -> str:
        ctx = StreamingContext(sc, "golden", 1000, 2)
        ctx.queue_stream([]).count_by_value(partitions).write("out", MemorySink())
        return ctx.fingerprint()

    assert fingerprint(2) == fingerprint(2)
    assert fingerprint(2) != fingerprint(3)


@pytest.mark.parametrize("output_names", [("a", "a")])
def test_duplicate_output_names_are_refused(sc: Any, output_names: tuple[str, str]) -> None:
    from service.errors import ConfigError

    ctx = StreamingContext(sc, "golden", 1000, 2)
    stream = ctx.queue_stream([])
    stream.write(output_names[0], MemorySink())
    with pytest.raises(ConfigError, match="declared twice"):
        stream.write(output_names[1], MemorySink())


class ThreadNotingSink(MemorySink):
    """A memory sink that writes partitions side by side and notes which thread wrote each."""

    writes_in_parallel = True

    def __init__(self) -> None:
        super().__init__()
        self.threads: dict[int, str] = {}

    def write(self, key: Any, rows: Any) -> Any:
        import threading

        self.threads[key.partition] = threading.current_thread().name
        return super().write(key, rows)


def test_a_sink_that_writes_in_parallel_gets_a_thread_per_partition_and_the_same_rows(
    sc: Any,
) -> None:
    def one_run(sink: MemorySink) -> dict[Any, list[Any]]:
        ctx = StreamingContext(sc, "golden", 1000, 3)
        words = ctx.queue_stream([["x y z w"] * 5, ["q r s"]]).flat_map(str.split)
        words.count_by_value().write("out", sink)
        run_contexts(ctx, 2)
        return {key: sorted(rows) for key, rows in sink.parts.items()}

    parallel = ThreadNotingSink()

    assert one_run(parallel) == one_run(MemorySink())
    assert sorted(parallel.threads) == [0, 1, 2]
    assert all(name.startswith("write-out") for name in parallel.threads.values())
