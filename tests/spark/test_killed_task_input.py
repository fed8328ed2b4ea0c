"""A task Spark kills while it waits for its input writes nothing
(service/graph/partition_input.py).

A cancelled job's tasks are killed, and PySpark's worker used to take the closed connection for
the end of its partition: the write task then published a short (here: empty) part as the whole.
The upstream of the write runs in a Python worker of its own, slowly, so that the write task is
still waiting for rows when the job is cancelled; each write task reports whether its input was
cut, and no part may be published.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from pyspark import RDD

from service.errors import PartitionInputCut
from service.graph.outputs import PartitionReport, write_partition
from service.graph.partition_input import GuardedInput
from sinks.files import FileSink

PARTITIONS = 2
ROWS = 2_000  # per partition, produced at about 100 a second: far longer than the test waits
GROUP = "killed-task-input"
REPORT_WAIT_S = 120.0  # Spark kills a cancelled task's worker after 2 s (killTimeout)


def slow_row(root: str, index: int, rows: Iterable[int]) -> Iterator[int]:
    (Path(root) / f"started-{index}").touch()
    for row in rows:
        time.sleep(0.01)
        yield row


def write_reporting_cut(root: str, index: int, rows: Iterable[Any]) -> Iterator[PartitionReport]:
    try:
        yield from write_partition(FileSink(Path(root) / "files"), "app", "out", 1000, index, rows)
    except PartitionInputCut:
        (Path(root) / f"cut-{index}").touch()
        raise


def wait_for(paths: list[Path], limit_s: float) -> None:
    deadline = time.monotonic() + limit_s
    while not all(path.exists() for path in paths) and time.monotonic() < deadline:
        time.sleep(0.2)


def wait_for_reports(root: Path, limit_s: float) -> None:
    """Until each write task has reported a cut input or published its part."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        published = {int(p.stem.split("-")[1]) for p in root.rglob("part-*")}
        cut = {p for p in range(PARTITIONS) if (root / f"cut-{p}").exists()}
        if published | cut == set(range(PARTITIONS)):
            return
        time.sleep(0.2)


@pytest.mark.timeout(240)
def test_a_cancelled_write_task_waiting_for_rows_publishes_no_part(sc: Any, tmp_path: Path) -> None:
    root = str(tmp_path)
    upstream = sc.parallelize(range(PARTITIONS * ROWS), PARTITIONS).mapPartitionsWithIndex(
        partial(slow_row, root)
    )
    # A plain RDD over the upstream's JVM side: the write runs in a second Python worker, fed by
    # the executor as the upstream yields, instead of in the same pipeline.
    fed = RDD(upstream._jrdd, sc, upstream._jrdd_deserializer)
    job = fed.mapPartitionsWithIndex(GuardedInput(partial(write_reporting_cut, root)))
    outcome: list[BaseException] = []

    def run() -> None:
        sc.setJobGroup(GROUP, "a job cancelled while its tasks wait for input")
        try:
            job.collect()
        except Exception as error:  # the cancellation, as the driver sees it
            outcome.append(error)

    runner = threading.Thread(target=run)
    runner.start()
    wait_for([tmp_path / f"started-{p}" for p in range(PARTITIONS)], REPORT_WAIT_S)
    sc.cancelJobGroup(GROUP)
    runner.join(REPORT_WAIT_S)
    assert outcome, "the job was not cancelled"

    wait_for_reports(tmp_path, REPORT_WAIT_S)
    parts = sorted(p.name for p in tmp_path.rglob("part-*"))
    assert parts == [], f"a killed task published {parts}"
    cut = [p for p in range(PARTITIONS) if (tmp_path / f"cut-{p}").exists()]
    assert cut == list(range(PARTITIONS)), f"only write tasks {cut} saw their input cut"
