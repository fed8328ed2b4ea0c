"""A real Spark standalone cluster on loopback, from pyspark's own jars, for tests and demos.

One master and N workers, each its own JVM started with pyspark's `bin/spark-class` (the
`org.apache.spark.deploy.master.Master` and `...deploy.worker.Worker` classes), on free loopback
ports. Each worker launches its own executor JVM per application, and that executor its own
Python workers. Every process is one this module started (or a child of one) and is stopped by
PID.

On Linux each worker gets a loopback address of its own (127.0.0.2, 127.0.0.3, ...): Spark never
runs a speculative copy of a task on a host that already runs an attempt of it, so workers that
all called themselves 127.0.0.1 would make speculation impossible to test. Traffic stays on
loopback either way.

    with LocalSparkCluster(workers=2) as cluster:
        print(cluster.master_url)              # spark://127.0.0.1:41234
        cluster.executor_pids(0)               # the executor JVMs under worker 0
        cluster.kill_worker(1)
        cluster.restart_worker(1)
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from service.dev.leftovers import stop_at_exit, stopped
from service.dev.ports import free_port
from service.dev.processes import LoggedChild, StartedOnEnter, signal_pid, stop_escalating
from service.errors import DStreamsError

MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"
EXECUTOR_CLASS = "org.apache.spark.executor.CoarseGrainedExecutorBackend"
MASTER_HOST = "127.0.0.1"
# Master and worker daemons only keep the cluster's books; executors get spark.executor.memory.
DAEMON_MEMORY = "256m"
# Starting a master and two workers takes ~5 s on an idle 2-core machine, ~20 s on a busy one.
START_TIMEOUT_S = 120.0
# A worker asked to stop kills its executors first; after this grace period it is killed.
STOP_GRACE_S = 15.0


class SparkClusterError(DStreamsError):
    """The local Spark cluster could not be started or stopped."""


def spark_home() -> Path:
    """pyspark's own installation: its `jars/` and `bin/spark-class` make a Spark distribution."""
    import pyspark

    home = Path(pyspark.__file__).resolve().parent
    if not (home / "bin" / "spark-class").is_file() or not (home / "jars").is_dir():
        msg = f"expected pyspark at {home} to ship bin/spark-class and jars/, found neither"
        raise SparkClusterError(msg)
    return home


def worker_host(index: int, distinct_hosts: bool) -> str:
    """Worker `index`'s loopback address: 127.0.0.2, .3, ... or all 127.0.0.1."""
    return f"127.0.0.{index + 2}" if distinct_hosts else MASTER_HOST


def children_of(pid: int) -> list[int]:
    """PIDs whose parent is `pid` (Linux /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue  # exited while we looked
        # The command name (2nd field) may hold spaces; the parent PID follows its ')'.
        if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
            found.append(int(entry.name))
    return sorted(found)


def command_line(pid: int) -> list[str]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [part.decode(errors="replace") for part in raw.split(b"\0") if part]


@dataclass
class _Daemon(LoggedChild):
    """One master or worker JVM: its address, files and (while running) its process."""

    name: str
    host: str
    port: int
    ui_port: int
    home: Path
    process: subprocess.Popen[bytes] | None = None
    _log: IO[bytes] | None = None

    @property
    def log_path(self) -> Path:
        return self.home / f"{self.name}.log"

    @property
    def pid(self) -> int:
        if self.process is None:
            msg = f"{self.name} was never started"
            raise SparkClusterError(msg)
        return self.process.pid

    def launch(self, command: list[str], env: dict[str, str]) -> None:
        self.home.mkdir(parents=True, exist_ok=True)
        self.launch_in(self.home, command, env)  # pyspark's spark-class

    def stop(self, grace_s: float = STOP_GRACE_S) -> None:
        if self.process is not None:
            stop_escalating(self.process, f"Spark {self.name}", ((signal.SIGTERM, grace_s),))
        self.close_log()

    def log_tail(self, lines: int = 30) -> str:
        if not self.log_path.is_file():
            return "(no log written)"
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])


class LocalSparkCluster(StartedOnEnter):
    """A Spark standalone master and `workers` workers (`cores` and `memory` each) on loopback."""

    def __init__(
        self,
        workers: int = 2,
        cores: int = 1,
        memory: str = "1g",
        workdir: Path | None = None,
        distinct_hosts: bool | None = None,
    ) -> None:
        if workers < 1 or cores < 1:
            msg = f"expected at least 1 worker with 1 core, got {workers} x {cores}"
            raise SparkClusterError(msg)
        self.cores = cores
        self.memory = memory
        self._own_workdir = workdir is None
        self.workdir = Path(workdir or tempfile.mkdtemp(prefix="dstreams-spark-"))
        if distinct_hosts is None:
            distinct_hosts = sys.platform.startswith("linux")
        self.master = _Daemon("master", MASTER_HOST, free_port(), free_port(), self.workdir)
        self.workers = [
            _Daemon(
                f"worker-{i}",
                worker_host(i, distinct_hosts),
                free_port(),
                free_port(),
                self.workdir / f"worker-{i}",
            )
            for i in range(workers)
        ]

    @property
    def master_url(self) -> str:
        return f"spark://{self.master.host}:{self.master.port}"

    # --- life cycle ---------------------------------------------------------------------------

    def start(self) -> None:
        """Start the master, then every worker; return once the master counts them all alive."""
        stop_at_exit(self)
        try:
            self.master.launch(self._master_command(), self._env(self.master))
            deadline = time.monotonic() + START_TIMEOUT_S
            self._wait_for_port(self.master, deadline)
            for worker in self.workers:
                worker.launch(self._worker_command(worker), self._env(worker))
            self.wait_for_workers(len(self.workers), deadline)
        except BaseException:
            self.stop()
            raise

    def stop(self, keep_workdir: bool = False) -> None:
        """Stop every worker (each kills its executors), then the master; kill any executor
        that outlived its worker. A work folder this cluster made is removed unless kept. Safe
        to call twice."""
        executors = [pid for i in range(len(self.workers)) for pid in self.executor_pids(i)]
        for worker in self.workers:
            worker.stop()
        self.master.stop()
        for pid in executors:
            signal_pid(pid, signal.SIGKILL)
        stopped(self)
        if self._own_workdir and not keep_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def kill_worker(self, index: int) -> None:
        """SIGKILL worker `index`; its executors notice their worker is gone and exit."""
        self.workers[index].kill()

    def restart_worker(self, index: int) -> None:
        """Start worker `index` again (after `kill_worker`) and wait until the master has it."""
        worker = self.workers[index]
        if worker.running:
            return
        worker.launch(self._worker_command(worker), self._env(worker))
        self.wait_for_workers(len(self.workers), time.monotonic() + START_TIMEOUT_S)

    def executor_pids(self, index: int) -> list[int]:
        """The executor JVMs worker `index` runs now (one per application using it)."""
        worker = self.workers[index]
        if not worker.running:
            return []
        return [pid for pid in children_of(worker.pid) if EXECUTOR_CLASS in command_line(pid)]

    # --- state --------------------------------------------------------------------------------

    def master_state(self) -> dict[str, Any]:
        """The master's own account (`/json` of its web UI): workers, applications, status."""
        url = f"http://{self.master.host}:{self.master.ui_port}/json/"
        with urllib.request.urlopen(url, timeout=5) as reply:  # noqa: S310 - loopback only
            return dict(json.loads(reply.read()))

    def alive_workers(self) -> int:
        try:
            state = self.master_state()
        except OSError:
            return 0
        return sum(1 for worker in state.get("workers", []) if worker.get("state") == "ALIVE")

    def wait_for_workers(self, count: int, deadline: float) -> None:
        while self.alive_workers() < count:
            for daemon in [self.master, *self.workers]:
                if daemon.process is not None and not daemon.running:
                    self._fail(daemon, f"exited with {daemon.process.returncode}")
            if time.monotonic() > deadline:
                self._fail(self.master, f"counted fewer than {count} alive workers")
            time.sleep(0.5)

    def wait_idle(self, timeout_s: float = START_TIMEOUT_S) -> None:
        """Until the master runs no application and every worker's cores are free.

        A driver that exited (or was killed) keeps its executors until the master has noticed and
        the workers have torn them down; the next application would wait for cores meanwhile."""
        deadline = time.monotonic() + timeout_s
        while True:
            state = self.master_state()
            apps = [app.get("id") for app in state.get("activeapps", [])]
            busy = [w.get("host") for w in state.get("workers", []) if w.get("coresused", 0)]
            if not apps and not busy:
                return
            if time.monotonic() > deadline:
                self._fail(self.master, f"still running {apps} on {busy} after {timeout_s:.0f}s")
            time.sleep(0.5)

    # --- commands -----------------------------------------------------------------------------

    def _master_command(self) -> list[str]:
        return [
            str(spark_home() / "bin" / "spark-class"),
            MASTER_CLASS,
            *("--host", self.master.host),
            *("--port", str(self.master.port)),
            *("--webui-port", str(self.master.ui_port)),
        ]

    def _worker_command(self, worker: _Daemon) -> list[str]:
        return [
            str(spark_home() / "bin" / "spark-class"),
            WORKER_CLASS,
            *("--host", worker.host),
            *("--port", str(worker.port)),
            *("--webui-port", str(worker.ui_port)),
            *("--cores", str(self.cores)),
            *("--memory", self.memory),
            *("--work-dir", str(worker.home / "work")),
            self.master_url,
        ]

    def _env(self, daemon: _Daemon) -> dict[str, str]:
        # Nothing of this process's Spark or Python path: executors must find the job's code
        # the way a real cluster's would (installed, or shipped by the driver).
        env = {
            key: value
            for key, value in os.environ.items()
            if not key.startswith(("SPARK_", "PYSPARK_")) and key != "PYTHONPATH"
        }
        env.update(
            SPARK_HOME=str(spark_home()),
            SPARK_LOCAL_IP=daemon.host,
            SPARK_LOCAL_DIRS=str(daemon.home / "local"),
            SPARK_DAEMON_MEMORY=DAEMON_MEMORY,
            # The REST submission server would take the fixed port 6066 (one cluster per host).
            SPARK_MASTER_OPTS="-Dspark.master.rest.enabled=false",
            PYTHONHASHSEED="0",
        )
        return env

    def _wait_for_port(self, daemon: _Daemon, deadline: float) -> None:
        while not _listening(daemon.host, daemon.port):
            if not daemon.running:
                assert daemon.process is not None  # noqa: S101 - launched above
                self._fail(daemon, f"exited with {daemon.process.returncode}")
            if time.monotonic() > deadline:
                self._fail(daemon, f"did not listen on {daemon.host}:{daemon.port}")
            time.sleep(0.25)

    def _fail(self, daemon: _Daemon, found: str) -> None:
        msg = (
            f"expected the Spark {daemon.name} to start within {START_TIMEOUT_S:.0f}s; it "
            f"{found}. Its log ({daemon.log_path}) ends:\n{daemon.log_tail()}"
        )
        raise SparkClusterError(msg)


def _listening(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.5)
        return sock.connect_ex((host, port)) == 0
