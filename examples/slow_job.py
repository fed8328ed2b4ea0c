"""A deliberately slow job: every line costs a fixed sleep, so a batch's processing time grows with
its size. Backpressure tests and demos use it to overload the service on purpose.

The sleep is read on the executor, per record, from `DSTREAMS_SLOW_JOB_SLEEP_MS` (default 5 ms):
Spark's Python workers inherit the driver's environment, so setting it for `dstreams run` is
enough. The operator is a top-level function of an importable module, so it pickles by reference.

Configure a `lines` source and a `lines_out` sink; every line read is written as it is.
"""

from __future__ import annotations

import os
import time

from service.graph.context import StreamingContext

SLEEP_ENV = "DSTREAMS_SLOW_JOB_SLEEP_MS"
DEFAULT_SLEEP_MS = 5.0


def sleep_per_record_s() -> float:
    """The configured cost of one record, in seconds."""
    return float(os.environ.get(SLEEP_ENV, DEFAULT_SLEEP_MS)) / 1000


def slow_identity(line: str) -> str:
    """Returns `line` after sleeping for the configured per-record cost."""
    time.sleep(sleep_per_record_s())
    return line


def build(ctx: StreamingContext) -> None:
    # One stage, no shuffle: a batch's fixed cost stays small next to the per-record sleep.
    ctx.source("lines").map(slow_identity).write("lines_out")
