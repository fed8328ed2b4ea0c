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


@dataclass(frozen=True)
class EarliestTimestamp:
    """Key: the earliest Kafka record timestamp (ms) read from one partition; combined by min.

    With `LatestTimestamp`, what end-to-end latency is measured from. Reads report the first and
    last record of each fetch, which is exact for producer-stamped (CreateTime) partitions whose
    timestamps grow with the offset and a close bound otherwise. The lifecycle takes these keys
    out of the accumulator after each batch (`take_timestamps`), so they describe one batch.
    """

    topic: str
    partition: int


@dataclass(frozen=True)
class LatestTimestamp:
    """Key: the latest Kafka record timestamp (ms) read from one partition; combined by max."""

    topic: str
    partition: int


CounterKey: TypeAlias = (
    InputRecords | DecodeErrors | SkippedOffsets | EarliestTimestamp | LatestTimestamp
)
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
    """Adds `n` under `key`; timestamps keep the earliest or latest instead (so a range read by
    two jobs, or by a retried task, reports the same bounds as one read)."""
    if key not in counts:
        counts[key] = n
    elif isinstance(key, EarliestTimestamp):
        counts[key] = min(counts[key], n)
    elif isinstance(key, LatestTimestamp):
        counts[key] = max(counts[key], n)
    else:
        counts[key] += n


def record_timestamps(counts: Mapping[CounterKey, int]) -> tuple[int, int] | None:
    """(earliest, latest) record timestamp in ms over every partition, None without any.

    >>> record_timestamps({EarliestTimestamp("t", 0): 5, LatestTimestamp("t", 0): 9,
    ...                    EarliestTimestamp("t", 1): 3, InputRecords("t", 0): 2})
    (3, 9)
    """
    earliest = [n for key, n in counts.items() if isinstance(key, EarliestTimestamp)]
    latest = [n for key, n in counts.items() if isinstance(key, LatestTimestamp)]
    if not earliest and not latest:
        return None
    return min(earliest or latest), max(latest or earliest)


def is_timestamp(key: CounterKey) -> bool:
    """Timestamp keys describe one batch; every other key is a running total."""
    return isinstance(key, EarliestTimestamp | LatestTimestamp)


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
