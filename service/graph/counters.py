"""Counters that executors add up while reading a batch: typed keys and their Spark accumulator.

The keys are small frozen values (they pickle by reference and hash as dictionary keys), so the
driver reads what a counter counts from its type and fields, never by parsing a string.

    >>> counts = {InputRecords("words", 0): 7, InputRecords("words", 1): 3}
    >>> counts[DecodeErrors("words")] = 2
    >>> total_records(counts), total_decode_errors(counts)
    (10, 2)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TypeAlias


@dataclass(frozen=True)
class InputRecords:
    """Key: records read from one Kafka partition (the ones that failed to decode included)."""

    topic: str
    partition: int


@dataclass(frozen=True)
class DecodeErrors:
    """Key: records of one topic that failed to decode, or whose parse function raised."""

    topic: str


@dataclass(frozen=True)
class SkippedOffsets:
    """Key: a run `[from_offset, until_offset)` of one partition that a read skipped because
    retention had deleted it (only with `fail_on_data_loss: false`).

    The run is the key and its count is ignored: a source RDD read by several jobs reports the
    same run more than once, and it must be journaled and counted once.
    """

    topic: str
    partition: int
    from_offset: int
    until_offset: int

    @property
    def count(self) -> int:
        return self.until_offset - self.from_offset


CounterKey: TypeAlias = InputRecords | DecodeErrors | SkippedOffsets
Counts: TypeAlias = dict[CounterKey, int]


def total_records(counts: Mapping[CounterKey, int]) -> int:
    """Records read from every partition."""
    return sum(n for key, n in counts.items() if isinstance(key, InputRecords))


def total_decode_errors(counts: Mapping[CounterKey, int]) -> int:
    """Records of every topic that failed to decode."""
    return sum(n for key, n in counts.items() if isinstance(key, DecodeErrors))


def skipped_runs(counts: Mapping[CounterKey, int]) -> list[SkippedOffsets]:
    """The runs of deleted offsets that reads skipped, each once, in order."""
    return sorted(
        (key for key in counts if isinstance(key, SkippedOffsets)),
        key=lambda run: (run.topic, run.partition, run.from_offset),
    )


def add_count(counts: Counts, key: CounterKey, n: int) -> None:
    counts[key] = counts.get(key, 0) + n


class CountersParam:
    """A Spark accumulator parameter that adds `Counts` key by key.

    Spark only calls `zero` and `addInPlace`, so this needs no pyspark import and the keys stay
    importable (by the driver's observer, by unit tests) without loading Spark.
    """

    def zero(self, value: Counts) -> Counts:
        return {}

    def addInPlace(self, left: Counts, right: Counts) -> Counts:  # noqa: N802 - Spark's name
        for key, n in right.items():
            add_count(left, key, n)
        return left
