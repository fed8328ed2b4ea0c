"""Jobs of every shape, for the job-shape matrix (tests/kafka/test_job_shapes.py).

Input lines are ``"<id> <words...>"``. Each shape turns them into ``(id or word, text)`` pairs of
strings, so that one row format suits every sink: a Kafka record (key, value), a PostgreSQL row
of two text columns, a JSON line of the files sink. The shapes, for each source pair ``a<n>`` (a
topic of n partitions) and ``b<n>`` (a small topic beside it):

- ``map_<n>``: ``a.map(...)``, no shuffle: one task per input range, so as many as partitions.
- ``count_<n>``: word counts of ``a`` again, a second output from the same source (a shuffle).
- ``join_<n>``: ``a`` joined with ``b`` on the id, batch by batch.
- ``union_<n>``: ``a`` and ``b`` side by side: as many tasks as both have ranges.
- ``repartition_<n>``: ``a`` spread over `REPARTITION` partitions.

Each is written to every sink kind: output ``<shape>_<n>_<sink>`` for sink in `SINKS`.
"""

from __future__ import annotations

from service.graph.context import StreamingContext
from service.graph.dstream import DStream
from service.graph.functions import add, pair_with_one, words_of

SIZES = (1, 8, 32)
SINKS = ("kafka", "pg", "files")
SHAPES = ("map", "count", "join", "union", "repartition")
REPARTITION = 5


def output_name(shape: str, size: int, sink: str) -> str:
    return f"{shape}_{size}_{sink}"


def build(ctx: StreamingContext) -> None:
    """Every shape over every size, to every sink: the matrix in one service process."""
    for size in SIZES:
        _shapes(ctx, size)


def build_growing(ctx: StreamingContext) -> None:
    """Map-only outputs of a topic whose partitions grow and of a pattern that gains topics."""
    for source in ("grow", "pattern"):
        lines = ctx.source(source).map(split_id)
        for sink in SINKS:
            lines.write(f"{source}_{sink}")


def _shapes(ctx: StreamingContext, size: int) -> None:
    a = ctx.source(f"a{size}")
    b = ctx.source(f"b{size}")
    pairs_a, pairs_b = a.map(split_id), b.map(split_id)
    shaped: dict[str, DStream] = {
        "map": pairs_a,
        "count": a.flat_map(words_after_id).map(pair_with_one).reduce_by_key(add).map(as_text),
        "join": pairs_a.join(pairs_b).map(joined),
        "union": pairs_a.union(pairs_b),
        "repartition": pairs_a.repartition(REPARTITION),
    }
    for shape, stream in shaped.items():
        for sink in SINKS:
            stream.write(output_name(shape, size, sink))


def split_id(line: str) -> tuple[str, str]:
    """``"0007 w1 w2"`` -> ``("0007", "w1 w2")``."""
    record_id, _, rest = line.partition(" ")
    return record_id, rest


def words_after_id(line: str) -> list[str]:
    return words_of(split_id(line)[1])


def as_text(pair: tuple[str, int]) -> tuple[str, str]:
    return pair[0], str(pair[1])


def joined(pair: tuple[str, tuple[str, str]]) -> tuple[str, str]:
    record_id, (left, right) = pair
    return record_id, f"{left}|{right}"
