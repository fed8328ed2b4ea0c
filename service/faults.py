"""Named crash points for fault-injection tests; inert unless an environment variable names one.

`DSTREAMS_CRASH_AT=<point>` makes the process that reaches `<point>` die at once with
`os._exit` (no cleanup, no exception handlers: what SIGKILL would do). `DSTREAMS_CRASH_AFTER=N`
lets the first N-1 passes through the point go by. Executor-side points kill the Python worker,
which Spark then retries; driver-side points kill the driver.
"""

from __future__ import annotations

import os
import sys

CRASH_EXIT_CODE = 137
POINTS = (
    "after-planned",
    "sink-mid-write",
    "task-before-write",
    "task-after-write",
    "before-sink-commit",
    "before-completed",
    "before-ack",
    "checkpoint-files-written",
    "checkpoint-journaled",
)
_passes: dict[str, int] = {}


def crash_point(point: str) -> None:
    """Dies here if the environment names this point and its pass count is reached."""
    if os.environ.get("DSTREAMS_CRASH_AT") != point:
        return
    _passes[point] = _passes.get(point, 0) + 1
    if _passes[point] >= int(os.environ.get("DSTREAMS_CRASH_AFTER", "1")):
        sys.stderr.write(f"dstreams: crash point {point!r} reached; exiting as if killed\n")
        sys.stderr.flush()
        os._exit(CRASH_EXIT_CODE)
