"""One sink write in a process of its own, as a Spark task makes it on an executor.

    python sink_worker.py <job>    # <job>: a pickle of (sink, key, rows)

The worker loads the job, prints ``ready``, waits for a line on stdin (so that racing copies of a
task start together), writes, and prints the `WriteResult` as JSON ``[rows, skipped]``. With
``DSTREAMS_CRASH_AT=sink-mid-write`` in its environment it dies inside the write instead.
"""

from __future__ import annotations

import json
import pickle
import sys
from pathlib import Path


def main(job: Path) -> None:
    sink, key, rows = pickle.loads(job.read_bytes())  # noqa: S301 - written by the test itself
    print("ready", flush=True)
    sys.stdin.readline()
    result = sink.write(key, rows)
    print(json.dumps([result.rows, result.skipped]), flush=True)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
