"""Runs the whole suite as two streams of pytest processes side by side.

Most of the suite's time is spent waiting: for a driver's JVM to start, for a rate-limited feed,
for a session timeout, for a SIGKILLed driver's successor. One pytest process leaves the second
core idle for much of that, so `make test` runs two streams at once:

- the fault tier (`tests/chaos`), the cluster tier (`tests/cluster`) and the warm-standby tests in
  one process, then the container tier in a second (it needs
  `DSTREAMS_KAFKA_BACKEND=testcontainers`: the Docker engine, the images, and `CONTAINER_KAFKA`
  again on the Testcontainers broker);
- every other tier in one process.

The two streams take about the same time. Each process starts its own broker and PostgreSQL
server, so they share nothing but the machine. Their outputs go to log files that are printed
whole, one after the other, once both streams have ended; the exit status is the worst of all.

`DSTREAMS_TEST_STREAMS=1` runs the same tests as one stream (for a machine with one core, or to
read the output as it comes); `DSTREAMS_TEST_STREAMS=containers` runs the container tier alone.

    python devtools/test_streams.py [pytest arguments]
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

# The cluster tier and the standby's takeovers go with the faults, and the container tier after
# them: this evens out the two streams' times (a clean clone's CI run with the backpressure run
# here too: 1,196 s of faults and 246 s of containers against 1,279 s for the rest; the
# backpressure run took 73 s of the faults' time).
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
NOT_CONTAINERS = ["--ignore=tests/containers"]
# The Kafka tests that run a second time, on the Testcontainers broker: the transactions, the
# exactly-once sinks, and the service on the Kafka journal and under SIGTERM.
CONTAINER_KAFKA = [
    "tests/kafka/test_transactions.py",
    "tests/kafka/test_kafka_sink.py",
    "tests/kafka/test_kafka_journal_service.py",
    "tests/kafka/test_graceful_stop.py",
]


@dataclass(frozen=True)
class Run:
    """One pytest process: its arguments and what it adds to the environment."""

    arguments: list[str]
    env: dict[str, str] = field(default_factory=dict)


# A Docker engine (started when none answers, see service/dev/docker_engine.py), the local Kafka
# image under Testcontainers, and the dstreams image run as the Helm chart runs it.
CONTAINERS = Run(
    ["tests/containers", *CONTAINER_KAFKA], {"DSTREAMS_KAFKA_BACKEND": "testcontainers"}
)


def streams() -> dict[str, list[Run]]:
    mode = os.environ.get("DSTREAMS_TEST_STREAMS")
    if mode == "containers":
        return {"container tier": [CONTAINERS]}
    if mode == "1":
        everything = ["tests", "service", "connectors", "sinks", *EXAMPLE_TESTS]
        return {"all tiers": [Run([*everything, *NOT_CONTAINERS]), CONTAINERS]}
    return {
        "fault, cluster and container tiers": [Run([*FAULTS, *NOT_CONTAINERS]), CONTAINERS],
        "other tiers": [Run([*REST, *NOT_CONTAINERS])],
    }


class Stream(threading.Thread):
    """Runs its pytest processes one after the other into one log; `code` is the worst exit."""

    def __init__(self, name: str, runs: list[Run], log: Path, extra: list[str]) -> None:
        super().__init__(name=name, daemon=True)
        self.runs = runs
        self.log = log
        self.extra = extra
        self.code = 0
        self.process: subprocess.Popen[bytes] | None = None
        self.stopped = threading.Event()

    def run(self) -> None:
        started = time.monotonic()
        with self.log.open("wb") as out:
            for run in self.runs:
                if self.stopped.is_set():
                    break
                command = [sys.executable, "-m", "pytest", *run.arguments, *self.extra]
                out.write(f"$ {' '.join(command[1:])}\n".encode())
                out.flush()
                # Our own interpreter and pytest, with the arguments make passed on.
                self.process = subprocess.Popen(  # noqa: S603
                    command, stdout=out, stderr=subprocess.STDOUT, env={**os.environ, **run.env}
                )
                if self.stopped.is_set():  # interrupted while it was being started
                    self.process.send_signal(signal.SIGINT)
                self.code = max(self.code, self.process.wait())
        took = time.monotonic() - started
        print(f"[{self.name}] exit {self.code} after {took:.0f}s ({self.log})", flush=True)

    def interrupt(self) -> None:
        """SIGINT to the running pytest process (by PID), so its fixtures stop what they started;
        no further run of this stream starts."""
        self.stopped.set()
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)


def main(extra: list[str]) -> int:
    logs = Path(tempfile.mkdtemp(prefix="dstreams-test-streams-"))
    running = []
    for name, runs in streams().items():
        log = logs / f"{name.replace(' ', '-').replace(',', '')}.log"
        print(f"[{name}] {len(runs)} pytest run(s) > {log}", flush=True)
        stream = Stream(name, runs, log, extra)
        stream.start()
        running.append(stream)
    try:
        while any(stream.is_alive() for stream in running):
            time.sleep(1)
    except KeyboardInterrupt:
        for stream in running:
            stream.interrupt()
        for stream in running:
            stream.join()
        raise
    for stream in running:
        print(f"\n===== [{stream.name}] output =====", flush=True)
        sys.stdout.write(stream.log.read_text(errors="replace"))
    codes = {stream.name: stream.code for stream in running}
    print(f"\nexit codes: {codes}", flush=True)
    return max(codes.values())


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
