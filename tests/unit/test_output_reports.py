"""What a task tells the driver of its write is a named value (`PartitionReport`), summed into
the output's result by field name. No Spark: the task body runs as a plain function."""

from __future__ import annotations

from service.graph.outputs import PartitionReport, write_partition
from sinks.memory import MemorySink


def test_a_task_reports_its_partition_rows_and_attempt_by_name() -> None:
    sink = MemorySink()
    first = next(write_partition(sink, "app", "out", 1000, 2, iter(["a", "b"])))
    assert isinstance(first, PartitionReport)
    assert (first.partition, first.rows, first.skipped, first.attempt) == (2, 2, False, 0)
    assert first.write_seconds >= 0.0
    assert not first.opened_client


def test_a_replayed_task_reports_a_skip() -> None:
    sink = MemorySink()
    next(write_partition(sink, "app", "out", 1000, 0, iter([1])))
    again = next(write_partition(sink, "app", "out", 1000, 0, iter([1])))
    assert (again.rows, again.skipped) == (0, True)
    assert again._asdict().keys() == {
        "partition",
        "rows",
        "skipped",
        "opened_client",
        "attempt",
        "write_seconds",
    }
