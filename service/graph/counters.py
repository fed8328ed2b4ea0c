"""A Spark accumulator of named integer counters, summed across tasks."""

from __future__ import annotations

from pyspark.accumulators import AccumulatorParam


class CountersParam(AccumulatorParam):  # type: ignore[misc] # pyspark is untyped here
    """Adds dictionaries of counts key by key."""

    def zero(self, value: dict[str, int]) -> dict[str, int]:
        return {}

    def addInPlace(self, left: dict[str, int], right: dict[str, int]) -> dict[str, int]:  # noqa: N802
        for name, count in right.items():
            left[name] = left.get(name, 0) + count
        return left
