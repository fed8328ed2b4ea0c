"""Output operations: the only places where a batch's RDDs are turned into Spark jobs.

A `SinkOutput` runs one job per batch in which task `p` writes partition `p` under
`BatchKey(app, output, t, p)`; the sink makes that idempotent. Afterwards the driver calls
`sink.commit`. A batch whose input is certainly empty skips the job and commits zero partitions,
which is deterministic because emptiness is decided from the journaled plan, not from data.

Outputs see their stream only as a `BatchStream` (its RDD and its emptiness for a plan).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from functools import partial
from typing import Any

from service.graph.base import RDD, BatchFunction, BatchStream, OutputResult
from service.graph.plan import BatchPlan
from sinks.base import BatchKey, Sink

__all__ = ["ForeachBatchOutput", "Output", "OutputResult", "SinkOutput"]


# The output that carries a source's undecodable records is named `<source><suffix>`.
DEAD_LETTER_SUFFIX = ".dead-letters"


class SinkOutput:
    """`stream.write(name, sink)`: exactly-once delivery of every batch to `sink`."""

    exactly_once = True

    def __init__(self, stream: BatchStream, name: str, sink: Sink) -> None:
        self.stream = stream
        self.name = name
        self.sink = sink

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "stream": self.stream.node_id, "sink": type(self.sink).__name__}

    def setup(self, app: str) -> None:
        self.sink.setup(app, self.name)

    def run(self, app: str, plan: BatchPlan) -> OutputResult:
        if self.stream.is_empty(plan):
            return OutputResult(self.name, 0, 0, 0)
        started = time.monotonic()
        batch_time = plan.batch_time
        rdd = self.stream.rdd_at(plan)
        if self.sink.writes_on_driver:
            reports = self._write_on_driver(rdd, app, batch_time)
        else:
            write = partial(write_partition, self.sink, app, self.name, batch_time)
            reports = rdd.mapPartitionsWithIndex(write).collect()
        rows = sum(report[1] for report in reports)
        skipped = sum(1 for report in reports if report[2])
        return OutputResult(self.name, len(reports), rows, skipped, time.monotonic() - started)

    def commit(self, app: str, batch_time: int, result: OutputResult) -> None:
        self.sink.commit(app, self.name, batch_time, result.partitions)

    def close(self) -> None:
        self.sink.close()

    def _write_on_driver(self, rdd: RDD, app: str, batch_time: int) -> list[tuple[int, int, bool]]:
        """For driver-side sinks (console, tests): collect each partition, then write it."""
        parts = rdd.mapPartitionsWithIndex(collect_partition).collect()
        reports = []
        for index, rows in parts:
            result = self.sink.write(BatchKey(app, self.name, batch_time, index), rows)
            reports.append((index, result.rows, result.skipped))
        return reports


class ForeachBatchOutput:
    """`stream.foreach_batch(fn)`: hands the batch's RDD to a driver-side function.

    At-least-once: a replayed batch calls the function again. Use `write` for exactly-once.
    """

    exactly_once = False

    def __init__(self, stream: BatchStream, function: BatchFunction, name: str) -> None:
        self.stream = stream
        self.function = function
        self.name = name

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "stream": self.stream.node_id, "sink": "foreach_batch"}

    def setup(self, app: str) -> None:
        """Nothing to prepare: the function owns its destination."""

    def run(self, app: str, plan: BatchPlan) -> OutputResult:
        started = time.monotonic()
        rdd = self.stream.rdd_at(plan)
        if self.stream.is_empty(plan):
            rdd = rdd.context.emptyRDD()
        self.function(rdd, plan.batch_time)
        return OutputResult(self.name, 0, 0, 0, time.monotonic() - started)

    def commit(self, app: str, batch_time: int, result: OutputResult) -> None:
        """Nothing to commit: the function ran to completion or raised."""

    def close(self) -> None:
        """Nothing to release: the function owns its destination."""


Output = SinkOutput | ForeachBatchOutput


def collect_partition(index: int, rows: Iterable[Any]) -> Iterator[tuple[int, list[Any]]]:
    yield (index, list(rows))


def write_partition(
    sink: Sink, app: str, output: str, batch_time: int, index: int, rows: Iterable[Any]
) -> Iterator[tuple[int, int, bool]]:
    """Executor side: writes one partition and reports `(partition, rows, skipped)`."""
    from service import faults

    faults.crash_point("task-before-write")
    result = sink.write(BatchKey(app, output, batch_time, index), rows)
    faults.crash_point("task-after-write")
    yield (index, result.rows, result.skipped)
