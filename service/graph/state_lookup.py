"""Executor bodies of live state queries (`service.graph.queryable`): plain top-level functions
that read one partition of a keyed state's RDD, and the partition a key lives in.

They run in Python workers inside `SparkContext.runJob`, like `service.graph.state_functions`,
and pickle by reference. Records are the state RDD's `(key, (kind, value, touched_ms))`; the
outputs a `map_with_state` function returned sit among them and are never answered.

>>> rows = [("a", (0, 1, 0)), ("ab", (2, "out", 0)), ("ab", (1, 2, 0)), ("b", (0, 3, 0))]
>>> list(find_key("ab", rows))
[2]
>>> list(find_key("zz", rows))
[]
>>> list(find_prefix("a", 5, rows))
[('a', 1), ('ab', 2)]
>>> list(find_prefix("", 1, rows))
[('a', 1)]
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Iterator
from typing import Any

from service.graph.state_functions import OUTPUT


def find_key(key: Hashable, rows: Iterable[tuple[Any, tuple[Any, ...]]]) -> Iterator[Any]:
    """The state of `key` in this partition, if it has one (one value at most: a partition
    holds each key's state once)."""
    for row_key, entry in rows:
        if entry[0] != OUTPUT and row_key == key:
            yield entry[1]
            return


def find_prefix(
    prefix: str, limit: int, rows: Iterable[tuple[Any, tuple[Any, ...]]]
) -> Iterator[tuple[str, Any]]:
    """At most `limit` `(key, state)` pairs of this partition whose key is a string starting
    with `prefix`, in the partition's order (the same on every read of one batch's state)."""
    if limit <= 0:
        return
    found = 0
    for row_key, entry in rows:
        if entry[0] != OUTPUT and isinstance(row_key, str) and row_key.startswith(prefix):
            yield (row_key, entry[1])
            found += 1
            if found >= limit:
                return


def partition_of(partitions: int, key: Hashable) -> int:
    """The partition pyspark's `partitionBy(partitions)` puts `key` in: its default partitioner,
    `portable_hash(key) % partitions`. What a string hashes to depends on the interpreter's
    `PYTHONHASHSEED`, so only a process started with the workers' seed may call this for the
    workers (see `service.graph.key_placement.driver_hashes_like_workers`)."""
    from pyspark.rdd import portable_hash

    return int(portable_hash(key) % partitions)


def partitions_of(partitions: int, keys: Iterable[Hashable]) -> Iterator[int]:
    """`partition_of` for each key of a partition: run in a worker, it places keys exactly as
    the workers' shuffles do."""
    for key in keys:
        yield partition_of(partitions, key)
