"""A task Spark kills while it waits for its input writes nothing
(service/graph/partition_input.py).

A cancelled job's tasks are killed, and PySpark's worker used to take the closed connection for
the end of its partition: the write task then published a short (here: empty) part as the whole.
The upstream of the write runs in a Python worker of its own, slowly, so that the write task is
still waiting for rows when the job is cancelled. Spark then closes each write task's input and
kills its worker; which comes first varies, so a worker may die before it can tell. Each write
task records how its write ended; no part may ever be published, and within a few rounds at
least one task must have seen its input cut (the guard's own exception), or the test would not
show the guard at work.
"""

from __future__ import annotations

import os
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
ROWS = 2_000  # per partition, produced at about 100 a second: far longer than a round waits
ROUNDS = 3
GROUP = "killed-task-input"
WAIT_S = 60.0  # Spark kills a cancelled task's worker within seconds (killTimeout: 2 s)


def slow_rows(root: Path, index: int, rows: Iterable[int]) -> Iterator[int]:
    (root / f"started-{index}").touch()
    for row in rows:
        time.sleep(0.01)
        yield row


def write_recording_its_end(
    root: Path, index: int, rows: Iterable[Any]
) -> Iterator[PartitionReport]:
    (root / f"writer-{index}").write_text(str(os.getpid()))
    try:
        yield from write_partition(FileSink(root / "files"), "app", "out", 1000, index, rows)
    except BaseException as error:
        (root / f"failed-{index}").write_text(type(error).__name__)
        raise


def ended(root: Path, index: int) -> bool:
    """The write task of `index` failed, published, or its worker is gone."""
    if (root / f"failed-{index}").exists() or list(root.rglob(f"part-{index:05d}.*")):
        return True
    writer = root / f"writer-{index}"  # a worker's PID; /proc has it while the worker lives
    return writer.exists() and not Path(f"/proc/{writer.read_text()}").exists()


def wait_until(condition: Any, what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():
        assert time.monotonic() < deadline, f"still waiting for {what} after {WAIT_S:.0f} s"
        time.sleep(0.1)


def cancelled_round(sc: Any, root: Path) -> list[str]:
    """One job cancelled while its write tasks wait for rows; how each write task ended."""
    root.mkdir()
    upstream = sc.parallelize(range(PARTITIONS * ROWS), PARTITIONS)
    upstream = upstream.mapPartitionsWithIndex(partial(slow_rows, root))
    # A plain RDD over the upstream's JVM side: the write runs in a second Python worker, fed by
    # the executor as the upstream yields, instead of in the same pipeline.
    fed = RDD(upstream._jrdd, sc, upstream._jrdd_deserializer)
    job = fed.mapPartitionsWithIndex(GuardedInput(partial(write_recording_its_end, root)))
    errors: list[BaseException] = []

    def run() -> None:
        sc.setJobGroup(GROUP, "a job cancelled while its tasks wait for input")
        try:
            job.collect()
        except Exception as error:  # the cancellation, as the driver sees it
            errors.append(error)

    runner = threading.Thread(target=run)
    runner.start()
    wait_until(
        lambda: all((root / f"started-{p}").exists() for p in range(PARTITIONS)), "the tasks"
    )
    sc.cancelJobGroup(GROUP)
    runner.join(WAIT_S)
    assert errors, "the job was not cancelled"
    wait_until(lambda: all(ended(root, p) for p in range(PARTITIONS)), "the write tasks' ends")
    parts = sorted(p.name for p in root.rglob("part-*"))
    assert parts == [], f"a killed task published {parts}"
    return [
        (root / f"failed-{p}").read_text() if (root / f"failed-{p}").exists() else "killed"
        for p in range(PARTITIONS)
    ]


@pytest.mark.timeout(300)
def test_a_cancelled_write_task_waiting_for_rows_publishes_no_part(sc: Any, tmp_path: Path) -> None:
    ends: list[list[str]] = []
    for number in range(ROUNDS):
        ends.append(cancelled_round(sc, tmp_path / f"round-{number}"))
        if PartitionInputCut.__name__ in ends[-1]:
            return
    pytest.fail(f"no write task saw its input cut in {ROUNDS} rounds; they ended: {ends}")
