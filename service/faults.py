"""Named fault points for fault-injection tests; inert unless an environment variable names one.

`DSTREAMS_CRASH_AT=<point>` makes the process that reaches `<point>` die at once with
`os._exit` (no cleanup, no exception handlers: what SIGKILL would do). `DSTREAMS_CRASH_AFTER=N`
lets the first N-1 passes through the point go by (counted per process).
`DSTREAMS_CRASH_ONCE=<file>` lets only one process die there: the first to create `<file>`;
every other process passes, so one Python worker dies and Spark's retry of its task gets past.
Executor-side points kill the Python worker, which Spark then retries; driver-side points kill
the driver.

Straggle points: `DSTREAMS_STRAGGLE_AT=<point>` makes the first attempt of output task
`DSTREAMS_STRAGGLE_PARTITION` (default 0) sleep `DSTREAMS_STRAGGLE_S` seconds (default 20) when it
reaches `<point>`, at every batch; any later attempt of the task (a retry, a speculative copy)
runs at full speed, so that Spark's speculation has something to win. On a cluster, executors
see these variables only through `spark.executorEnv.<NAME>`.
"""

from __future__ import annotations

import os
import sys
import threading
import time

CRASH_EXIT_CODE = 137
POINTS = (
    "after-planned",
    "sink-mid-write",
    "task-before-write",
    "task-after-write",
    "state-changes-published",
    "before-sink-commit",
    "before-completed",
    "before-ack",
    "checkpoint-files-written",
    "checkpoint-journaled",
)
STRAGGLE_POINTS = ("task-before-write", "task-after-write")
DEFAULT_STRAGGLE_S = 20.0
_passes: dict[str, int] = {}
# The driver may write several partitions at once (service/graph/outputs.py): count every pass.
_passes_lock = threading.Lock()


def crash_point(point: str) -> None:
    """Dies here if the environment names this point and its pass count is reached."""
    if os.environ.get("DSTREAMS_CRASH_AT") != point:
        return
    with _passes_lock:
        _passes[point] = passes = _passes.get(point, 0) + 1
    if passes < int(os.environ.get("DSTREAMS_CRASH_AFTER", "1")):
        return
    once = os.environ.get("DSTREAMS_CRASH_ONCE")
    if once and not _first_to_claim(once):
        return
    sys.stderr.write(f"dstreams: crash point {point!r} reached; exiting as if killed\n")
    sys.stderr.flush()
    os._exit(CRASH_EXIT_CODE)


def straggle_point(point: str, partition: int, attempt: int) -> None:
    """Sleeps here if the environment names this point, `partition` and this is attempt 0."""
    if os.environ.get("DSTREAMS_STRAGGLE_AT") != point or attempt != 0:
        return
    if partition != int(os.environ.get("DSTREAMS_STRAGGLE_PARTITION", "0")):
        return
    seconds = float(os.environ.get("DSTREAMS_STRAGGLE_S", DEFAULT_STRAGGLE_S))
    sys.stderr.write(f"dstreams: straggle point {point!r}: task {partition} sleeps {seconds}s\n")
    sys.stderr.flush()
    time.sleep(seconds)


def _first_to_claim(path: str) -> bool:
    """Creates `path` unless it exists: atomic, so one process of many wins."""
    try:
        os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
    except FileExistsError:
        return False
    return True
