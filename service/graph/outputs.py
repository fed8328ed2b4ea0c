"""Output operations: the only places where a batch's RDDs are turned into Spark jobs.

A `SinkOutput` runs one job per batch in which task `p` writes partition `p` under
`BatchKey(app, output, t, p)`; the sink makes that idempotent. The number of tasks may differ
from batch to batch; every sink is told it before the job (`Sink.prepare_tasks`).
Afterwards the driver calls `sink.commit`. A batch whose input is certainly empty skips the job
and commits zero partitions, which is deterministic because emptiness is decided from the
journaled plan, not from data.

Outputs see their stream only as a `BatchStream` (its RDD and its emptiness for a plan).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any, NamedTuple

from service.graph.base import RDD, BatchFunction, BatchStream, OutputResult
from service.graph.jobs import job_group, jobs_of_group, start_job_group
from service.graph.partition_input import GuardedInput
from service.graph.placement import OutputPlacement
from service.graph.plan import BatchPlan
from sinks.base import NO_KAFKA, BatchKey, KafkaNeeds, Sink

__all__ = ["ForeachBatchOutput", "Output", "OutputResult", "PartitionReport", "SinkOutput"]

log = logging.getLogger(__name__)


# The output that carries a source's undecodable records is named `<source><suffix>`.
DEAD_LETTER_SUFFIX = ".dead-letters"


class PartitionReport(NamedTuple):
    """What a task tells the driver of its write of one partition."""

    partition: int
    rows: int
    skipped: bool
    """The key was committed already: nothing written."""
    opened_client: bool
    """The write had to set up a sink client first (see `sinks.base.WriteResult`)."""
    attempt: int
    """Spark's attempt number of the task: 0 for the first, more for a retry or a copy."""
    write_seconds: float
    """Seconds inside `sink.write`, computing the rows it pulled not counted."""


class SinkOutput:
    """`stream.write(name, sink)`: exactly-once delivery of every batch to `sink`."""

    exactly_once = True

    def __init__(
        self, stream: BatchStream, name: str, sink: Sink, placement: OutputPlacement | None = None
    ) -> None:
        self.stream = stream
        self.name = name
        self.sink = sink
        # On a cluster, partition p's task runs on the same executor each batch (placement.py).
        self.placement = placement or OutputPlacement()
        # Driver-side parallel writes, kept across batches: starting 4 threads for each batch
        # cost ~20 ms on 2 busy cores, on the latency path. Created at the first such write.
        self._writers: ThreadPoolExecutor | None = None
        self._writers_width = 0

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "stream": self.stream.node_id, "sink": type(self.sink).__name__}

    def setup(self, app: str) -> None:
        self.sink.setup(app, self.name)

    def kafka_needs(self, app: str) -> KafkaNeeds:
        return self.sink.kafka_needs(app, self.name)

    @property
    def writes_on_driver(self) -> bool:
        return self.sink.writes_on_driver

    def run(self, app: str, plan: BatchPlan) -> OutputResult:
        if self.stream.is_empty(plan):
            return OutputResult(self.name, 0, 0, 0)
        started = time.monotonic()
        batch_time = plan.batch_time
        rdd = self.stream.rdd_at(plan)
        group = job_group(app, batch_time, self.name)
        start_job_group(rdd.context, group)
        # A function of the journaled plan, so a replay prepares for the same count.
        self.sink.prepare_tasks(app, self.name, rdd.getNumPartitions())
        if self.sink.writes_on_driver:
            reports = self._write_on_driver(rdd, app, batch_time)
        else:
            # A killed task must not write the part of its partition it received as the whole.
            write = GuardedInput(partial(write_partition, self.sink, app, self.name, batch_time))
            reports = self.placement.pinned(rdd.mapPartitionsWithIndex(write)).collect()
        seconds = time.monotonic() - started
        self._log_later_attempts(batch_time, reports)
        return OutputResult(
            self.name,
            len(reports),
            rows=sum(report.rows for report in reports),
            skipped_partitions=sum(1 for report in reports if report.skipped),
            seconds=seconds,
            opened_clients=sum(1 for report in reports if report.opened_client),
            jobs=jobs_of_group(rdd.context, group),
            write_seconds=max((report.write_seconds for report in reports), default=0.0),
        )

    def _log_later_attempts(self, batch_time: int, reports: list[PartitionReport]) -> None:
        """Says which partitions a retry or a speculative copy wrote: worth seeing, and proof
        that the other attempts collapsed into it."""
        for report in reports:
            if report.attempt > 0:
                log.info(
                    "output %s batch %d: partition %d was written by attempt %d (a retry or a "
                    "speculative copy; %s), every other attempt fenced or skipped",
                    self.name,
                    batch_time,
                    report.partition,
                    report.attempt,
                    "it found the batch committed" if report.skipped else "it committed the batch",
                )

    def commit(self, app: str, batch_time: int, result: OutputResult) -> None:
        self.sink.commit(app, self.name, batch_time, result.partitions)

    def forget_before(self, app: str, batch_time: int) -> None:
        self.sink.forget_before(app, self.name, batch_time)

    def close(self) -> None:
        if self._writers is not None:
            self._writers.shutdown()
            self._writers = None
        self.sink.close()

    def _write_on_driver(self, rdd: RDD, app: str, batch_time: int) -> list[PartitionReport]:
        """For driver-side sinks (console, tests, the Kafka sink in local mode): collect each
        partition, then write it. A sink whose writes may overlap (`writes_in_parallel`) gets
        one thread per partition, so a batch waits for its slowest write, not for their sum."""
        parts = rdd.mapPartitionsWithIndex(collect_partition).collect()
        write = partial(self._timed_write, app, batch_time)
        if len(parts) > 1 and self.sink.writes_in_parallel:
            return list(self._writer_pool(len(parts)).map(write, parts))
        return [write(part) for part in parts]

    def _writer_pool(self, partitions: int) -> ThreadPoolExecutor:
        """The pool of driver-side writers, as wide as the widest batch so far."""
        if self._writers is None or self._writers_width < partitions:
            if self._writers is not None:
                self._writers.shutdown()
            self._writers = ThreadPoolExecutor(partitions, thread_name_prefix=f"write-{self.name}")
            self._writers_width = partitions
        return self._writers

    def _timed_write(
        self, app: str, batch_time: int, part: tuple[int, list[Any]]
    ) -> PartitionReport:
        index, rows = part
        started = time.monotonic()
        result = self.sink.write(BatchKey(app, self.name, batch_time, index), rows)
        seconds = time.monotonic() - started
        return PartitionReport(index, result.rows, result.skipped, result.opened_client, 0, seconds)


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

    def kafka_needs(self, app: str) -> KafkaNeeds:
        """Nothing the driver can know of: the function owns its destination."""
        return NO_KAFKA

    @property
    def writes_on_driver(self) -> bool:
        """The function runs on the driver (whatever Spark jobs it starts)."""
        return True

    def run(self, app: str, plan: BatchPlan) -> OutputResult:
        started = time.monotonic()
        rdd = self.stream.rdd_at(plan)
        if self.stream.is_empty(plan):
            rdd = rdd.context.emptyRDD()
        self.function(rdd, plan.batch_time)
        return OutputResult(self.name, 0, 0, 0, time.monotonic() - started)

    def commit(self, app: str, batch_time: int, result: OutputResult) -> None:
        """Nothing to commit: the function ran to completion or raised."""

    def forget_before(self, app: str, batch_time: int) -> None:
        """Nothing kept: the function owns its destination."""

    def close(self) -> None:
        """Nothing to release: the function owns its destination."""


Output = SinkOutput | ForeachBatchOutput


def collect_partition(index: int, rows: Iterable[Any]) -> Iterator[tuple[int, list[Any]]]:
    yield (index, list(rows))


def write_partition(
    sink: Sink, app: str, output: str, batch_time: int, index: int, rows: Iterable[Any]
) -> Iterator[PartitionReport]:
    """Executor side: writes one partition and reports how it went."""
    from service import faults

    attempt = task_attempt()
    faults.straggle_point("task-before-write", index, attempt)
    faults.crash_point("task-before-write")
    timed = PullTimer(rows)
    started = time.monotonic()
    result = sink.write(BatchKey(app, output, batch_time, index), timed)
    write_seconds = max(0.0, time.monotonic() - started - timed.seconds)
    faults.crash_point("task-after-write")
    faults.straggle_point("task-after-write", index, attempt)
    yield PartitionReport(
        index, result.rows, result.skipped, result.opened_client, attempt, write_seconds
    )


class PullTimer:
    """Iterates `rows` and adds up the time spent computing them, so that a task can tell its
    sink's own time from the upstream computation Spark pipelines into the same loop.

    >>> timer = PullTimer(iter([1, 2]))
    >>> list(timer), timer.seconds >= 0
    ([1, 2], True)
    """

    def __init__(self, rows: Iterable[Any]) -> None:
        self._rows = iter(rows)
        self.seconds = 0.0

    def __iter__(self) -> Iterator[Any]:
        return self

    def __next__(self) -> Any:
        started = time.monotonic()
        try:
            return next(self._rows)
        finally:
            self.seconds += time.monotonic() - started


def task_attempt() -> int:
    """This task's attempt number: 0 for the first, more for a retry or a speculative copy."""
    from pyspark import TaskContext

    context = TaskContext.get()
    return int(context.attemptNumber()) if context is not None else 0
