"""Runs `dstreams run` (or `dstreams ingest`) as a child process for tests, the demo and
benchmarks.

The process is started with its own config file and log, and stopped (SIGTERM) or killed
(SIGKILL) by its PID only. `/status` is read over HTTP to wait for progress.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from service.dev.ports import free_port

REPO_ROOT = Path(__file__).resolve().parents[2]


class ServiceProcess:
    """One process of a job; `config` is the YAML document (a dict) it runs with.

    `command` is the `dstreams` command (`run`: a driver; `ingest`: the ingest endpoint). The
    process serves HTTP on `port`, a free loopback port set as `http.port` for a driver and
    `ingest.port` for the ingest endpoint.
    """

    def __init__(
        self,
        config: dict[str, Any],
        workdir: Path,
        env: Mapping[str, str] | None = None,
        name: str = "service",
        command: str = "run",
        program: Sequence[str] = (sys.executable, "-m", "service"),
        cwd: Path = REPO_ROOT,
    ) -> None:
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.command = command
        section = "ingest" if command == "ingest" else "http"
        served = {**config.get(section, {}), "host": "127.0.0.1", "port": self.port}
        self.config = {**config, section: served}
        self.config.setdefault("logging", {"format": "json", "level": "INFO"})
        self.env = dict(env or {})
        self.name = name
        self.config_path = self.workdir / f"{name}.yaml"
        self.log_path = self.workdir / f"{name}.log"
        self.process: subprocess.Popen[bytes] | None = None
        self.starts = 0
        # The `dstreams` command: `python -m service` from the checkout by default; a test of
        # the console script runs that instead, from a directory of its own.
        self.program = list(program)
        self.cwd = cwd

    def start(self, extra_env: Mapping[str, str] | None = None) -> None:
        self.config_path.write_text(yaml.safe_dump(self.config))
        env = {**os.environ, "PYTHONHASHSEED": "0", **self.env, **(extra_env or {})}
        with open(self.log_path, "ab") as log:
            log.write(f"--- start {self.starts} ---\n".encode())
            self.process = subprocess.Popen(  # noqa: S603 - our own interpreter or console script
                [*self.program, self.command, "--config", str(self.config_path)],
                cwd=self.cwd,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
            )
        self.starts += 1

    @property
    def pid(self) -> int:
        if self.process is None:
            msg = "the service process was never started"
            raise RuntimeError(msg)
        return self.process.pid

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def kill(self) -> int:
        """SIGKILL, as a crash would; returns the exit code."""
        if self.running():
            os.kill(self.pid, signal.SIGKILL)
        return self.wait(30)

    def terminate(self, timeout_s: float = 120) -> int:
        """SIGTERM (graceful stop); returns the exit code."""
        if self.running():
            os.kill(self.pid, signal.SIGTERM)
        return self.wait(timeout_s)

    def wait(self, timeout_s: float) -> int:
        assert self.process is not None  # noqa: S101 - checked by pid above
        return self.process.wait(timeout=timeout_s)

    def status(self) -> dict[str, Any] | None:
        """The `/status` document, or None while the HTTP endpoint is not up."""
        return self.get_json("/status")

    def get_json(self, path: str) -> dict[str, Any] | None:
        body = self.get(path)
        return None if body is None else dict(json.loads(body))

    def get(self, path: str) -> bytes | None:
        url = f"http://127.0.0.1:{self.port}{path}"
        try:
            with urllib.request.urlopen(url, timeout=5) as reply:  # noqa: S310 - loopback only
                return bytes(reply.read())
        except OSError:
            return None

    def wait_for(
        self, predicate: Callable[[dict[str, Any]], bool], timeout_s: float, what: str
    ) -> dict[str, Any]:
        """Polls `/status` until `predicate` holds; fails naming `what` and the log's tail."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process is not None and self.process.poll() is not None:
                msg = f"the service exited ({self.process.returncode}) before {what}\n"
                raise AssertionError(msg + self.log_tail())
            status = self.status()
            if status is not None and predicate(status):
                return status
            time.sleep(0.25)
        msg = f"timed out after {timeout_s}s waiting for {what}\n"
        raise AssertionError(msg + self.log_tail())

    def completed_batches(self) -> int:
        status = self.status() or {}
        return int(status.get("totals", {}).get("completed", 0))

    def log_tail(self, lines: int = 40) -> str:
        if not self.log_path.exists():
            return "(no log)"
        text = self.log_path.read_text(errors="replace").splitlines()
        kept = [line for line in text if not line.startswith("%")]
        return "\n".join(kept[-lines:])

    def __enter__(self) -> ServiceProcess:
        return self

    def __exit__(self, *_: object) -> None:
        if self.running():
            self.kill()
