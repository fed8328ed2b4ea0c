"""Operator bodies: plain top-level functions with no Spark import.

They pickle by reference and are unit-tested without a JVM. The graph in
`service.graph.dstream` wires them into RDD transformations.
"""

from __future__ import annotations

import operator
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from itertools import chain
from typing import Any, TypeVar

T = TypeVar("T")
K = TypeVar("K")
V = TypeVar("V")


def pair_with_one(value: T) -> tuple[T, int]:
    """`x -> (x, 1)`: the first half of counting by value.

    >>> pair_with_one("cat")
    ('cat', 1)
    """
    return (value, 1)


def add(left: Any, right: Any) -> Any:
    return operator.add(left, right)


def count_iterator(rows: Iterable[Any]) -> Iterator[tuple[None, int]]:
    """One `(None, n)` per partition: the per-partition half of a stream-wide count.

    >>> list(count_iterator(iter("abc")))
    [(None, 3)]
    """
    yield (None, sum(1 for _ in rows))


def second(pair: tuple[Any, V]) -> V:
    return pair[1]


def key_by_position(index: int, rows: Iterable[T]) -> Iterator[tuple[tuple[int, int], T]]:
    """Keys rows by (partition, position) so a repartition spreads them the same way on replay.

    >>> list(key_by_position(2, ["a", "b"]))
    [((2, 0), 'a'), ((2, 1), 'b')]
    """
    for position, row in enumerate(rows):
        yield ((index, position), row)


def apply_to_values(
    function: Callable[[V], Any],
) -> Callable[[tuple[K, V]], tuple[K, Any]]:
    """Lifts `f` to `(k, v) -> (k, f(v))`.

    >>> apply_to_values(len)(("word", "abc"))
    ('word', 3)
    """

    def mapped(pair: tuple[K, V]) -> tuple[K, Any]:
        return (pair[0], function(pair[1]))

    return mapped


def count_words(lines: Iterable[str]) -> Iterator[tuple[str, int]]:
    """Per-partition word counts: the whole of a word count's map side in one pass (C-speed
    `Counter.update`), so the shuffle carries one pair per distinct word, not one per word.

    >>> sorted(count_words(["The cat", "the hat"]))
    [('cat', 1), ('hat', 1), ('the', 2)]
    """
    # map/chain/Counter all run in C: no Python bytecode per line or per word.
    words = chain.from_iterable(map(str.split, map(str.lower, lines)))
    yield from Counter(words).items()


def words_of(line: str) -> list[str]:
    """Splits a line on white space and lower-cases it: the word-count example's tokenizer.

    >>> words_of("  Hello  World ")
    ['hello', 'world']
    """
    return line.lower().split()


def combine_in_partition(
    create: Callable[[Any], Any], merge_value: Callable[[Any, Any], Any], pairs: Iterable[Any]
) -> Iterator[tuple[Any, Any]]:
    """A whole `combineByKey` inside one partition, keys in the order first seen: what a
    one-partition shuffle of one partition computes, without the shuffle's stage.

    >>> list(combine_in_partition(singleton_list, append_value, [("a", 1), ("b", 2), ("a", 3)]))
    [('a', [1, 3]), ('b', [2])]
    """
    combined: dict[Any, Any] = {}
    for key, value in pairs:
        combined[key] = merge_value(combined[key], value) if key in combined else create(value)
    return iter(combined.items())


def identity(value: T) -> T:
    return value


def singleton_list(value: T) -> list[T]:
    return [value]


def append_value(values: list[T], value: T) -> list[T]:
    values.append(value)
    return values
