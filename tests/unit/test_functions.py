"""Operator bodies are plain functions: tested here without Spark."""

from __future__ import annotations

from service.graph import functions


def test_count_words_counts_per_partition_lower_cased() -> None:
    counts = dict(functions.count_words(["A b a", "", "b  c"]))
    assert counts == {"a": 2, "b": 2, "c": 1}


def test_words_of_matches_count_words() -> None:
    lines = ["The cat", "the CAT sat"]
    flat = [w for line in lines for w in functions.words_of(line)]
    assert sorted(dict(functions.count_words(lines)).items()) == sorted(
        {w: flat.count(w) for w in set(flat)}.items()
    )


def test_key_by_position_is_stable() -> None:
    assert list(functions.key_by_position(3, "ab")) == [((3, 0), "a"), ((3, 1), "b")]


def test_count_iterator_and_second() -> None:
    assert list(functions.count_iterator(iter(range(5)))) == [(None, 5)]
    assert functions.second(("k", "v")) == "v"
