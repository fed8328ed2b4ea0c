"""Console sink: prints the first rows of every batch, like Spark's `pprint`. Not exactly-once."""

from __future__ import annotations

import sys
from collections.abc import Iterable
from typing import Any

from sinks.base import BatchKey, WithoutKafka, WriteResult


class ConsoleSink(WithoutKafka):
    """Shows up to `max_rows` rows of each batch partition on standard output."""

    writes_on_driver = True  # the driver's standard output is the one people watch
    writes_in_parallel = False  # one partition's rows together, not interleaved

    def __init__(self, max_rows: int = 10) -> None:
        self.max_rows = max_rows

    def write(self, key: BatchKey, rows: Iterable[Any]) -> WriteResult:
        shown = 0
        total = 0
        for row in rows:
            if shown < self.max_rows:
                sys.stdout.write(f"[{key.output} t={key.batch_time} p={key.partition}] {row!r}\n")
                shown += 1
            total += 1
        if total > shown:
            sys.stdout.write(f"[{key.output} t={key.batch_time} p={key.partition}] ...\n")
        return WriteResult(rows=total)

    def commit(self, app: str, output: str, batch_time: int, partitions: int) -> None:
        sys.stdout.flush()

    def close(self) -> None:
        """Nothing to release but what is still buffered."""
        sys.stdout.flush()
