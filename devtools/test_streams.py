"""Runs the suite (every tier but containers) as two pytest processes side by side.

Most of the suite's time is spent waiting: for a driver's JVM to start, for a rate-limited feed,
for a session timeout, for a SIGKILLed driver's successor. One pytest process leaves the second
core idle for much of that, so `make test` runs the fault tier (`tests/chaos`), the cluster tier
(`tests/cluster`) and the warm-standby tests in one process and every other tier in another; the
two take about the same time. Each process starts its own broker and PostgreSQL server, so they
share nothing but the machine. Their outputs go to log files that are printed whole, one after the
other, once both have ended; the exit status is the worse of the two.

`DSTREAMS_TEST_STREAMS=1` runs the same tests in one process instead (for a machine with one core,
or to read the output as it comes).

    python devtools/test_streams.py [pytest arguments]
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# The cluster tier and the standby's takeovers go with the faults: this evens out the two
# processes' times (a clean clone's CI run: 21.5 and 25.2 minutes without the standby's, which
# take about two).
FAULTS = ["tests/chaos", "tests/cluster", "tests/kafka/test_standby.py"]
# The examples' tests, not the examples: those are jobs, with no docstring examples to run.
EXAMPLE_TESTS = sorted(str(path) for path in Path("examples").glob("test_*.py"))
REST = [
    "tests",
    "service",
    "connectors",
    "sinks",
    *EXAMPLE_TESTS,
    "--ignore=tests/chaos",
    "--ignore=tests/kafka/test_standby.py",
    "--ignore=tests/cluster",
]
COMMON = ["--ignore=tests/containers"]


def streams() -> dict[str, list[str]]:
    if os.environ.get("DSTREAMS_TEST_STREAMS") == "1":
        return {"all tiers": ["tests", "service", "connectors", "sinks", *EXAMPLE_TESTS]}
    return {"fault and cluster tiers": FAULTS, "other tiers": REST}


def main(extra: list[str]) -> int:
    logs = Path(tempfile.mkdtemp(prefix="dstreams-test-streams-"))
    running: dict[str, tuple[subprocess.Popen[bytes], Path, float]] = {}
    try:
        for name, paths in streams().items():
            log = logs / f"{name.replace(' ', '-')}.log"
            command = [sys.executable, "-m", "pytest", *paths, *COMMON, *extra]
            print(f"[{name}] {' '.join(command[1:])} > {log}", flush=True)
            with log.open("wb") as out:
                # Our own interpreter and pytest, with the arguments make passed on.
                process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)  # noqa: S603
            running[name] = (process, log, time.monotonic())
        codes = {name: wait(name, *entry) for name, entry in running.items()}
    except KeyboardInterrupt:
        stop(running)
        raise
    for name, (_process, log, _started) in running.items():
        print(f"\n===== [{name}] output =====", flush=True)
        sys.stdout.write(log.read_text(errors="replace"))
    print(f"\nexit codes: {codes}", flush=True)
    return max(codes.values())


def wait(name: str, process: subprocess.Popen[bytes], log: Path, started: float) -> int:
    code = process.wait()
    print(f"[{name}] exit {code} after {time.monotonic() - started:.0f}s ({log})", flush=True)
    return code


def stop(running: dict[str, tuple[subprocess.Popen[bytes], Path, float]]) -> None:
    """Interrupts the pytest processes this script started (by PID), so their fixtures stop the
    brokers and servers they started."""
    for process, _log, _started in running.values():
        if process.poll() is None:
            process.send_signal(signal.SIGINT)
    for process, _log, _started in running.values():
        process.wait()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
