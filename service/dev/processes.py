"""Child processes of the development tooling: started with a log of their own, dying with the
Python process that started them, and stopped by their PID only (never by name).

`LoggedChild` is one long-running child (a Kafka broker, a Spark daemon); `stop_escalating`
stops a child with signals of growing force; `StartedOnEnter` is a local server or cluster that
starts on `with` and stops when the block ends; `log_started` says how long a start took.
"""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import subprocess
import time
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Self

log = logging.getLogger(__name__)


def die_with_parent() -> None:
    """Run in the child before exec: the kernel SIGKILLs it when its parent dies.

    If the Python process dies without calling stop() (SIGKILL, OOM), its children must not
    linger on a shared machine. PR_SET_PDEATHSIG survives exec (of spark-class, then java) but
    fires when the *thread* that forked exits, so children are started from the thread that
    owns them (in practice, the main thread).
    """
    pr_set_pdeathsig = 1
    ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL)


def signal_pid(pid: int, signum: signal.Signals) -> None:
    """Send `signum` to `pid`; a process that is already gone is not an error."""
    try:
        os.kill(pid, signum)
    except ProcessLookupError:
        pass  # exited before the signal


def stop_escalating(
    process: subprocess.Popen[bytes], name: str, steps: Sequence[tuple[signal.Signals, float]]
) -> None:
    """Stop `process` by its PID: each `(signal, grace seconds)` of `steps` in turn until it has
    exited, then SIGKILL; it is reaped either way."""
    for signum, grace_s in steps:
        if process.poll() is not None:
            return
        process.send_signal(signum)  # none once it has exited and been reaped
        try:
            process.wait(timeout=grace_s)
            return
        except subprocess.TimeoutExpired:
            log.warning("%s PID %s ignored %s for %.0f s", name, process.pid, signum.name, grace_s)
    process.kill()
    process.wait()


class LoggedChild(ABC):
    """A long-running child process whose output is appended to `log_path`.

    Subclasses are dataclasses holding `process` (while started) and `_log` (its open log).
    """

    process: subprocess.Popen[bytes] | None
    _log: IO[bytes] | None

    @property
    @abstractmethod
    def log_path(self) -> Path: ...

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def launch_in(self, cwd: Path, command: list[str], env: Mapping[str, str] | None) -> None:
        """Start `command` in `cwd`, its output appended to the log, in a session of its own."""
        self.close_log()
        self._log = self.log_path.open("ab")
        self.process = subprocess.Popen(  # noqa: S603 - fixed argv, no shell
            command,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            cwd=cwd,
            env=env,
            start_new_session=True,  # Ctrl-C reaches Python, which stops its children in order
            preexec_fn=die_with_parent,
        )

    def signal(self, signum: signal.Signals) -> None:
        """Send `signum` to the process while it runs."""
        if self.process is not None:
            self.process.send_signal(signum)  # none once it has exited and been reaped

    def kill(self) -> None:
        """SIGKILL the process and wait until it is gone; close the log."""
        self.signal(signal.SIGKILL)
        if self.process is not None:
            self.process.wait()
        self.close_log()

    def close_log(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None


def log_started(logger: logging.Logger, what: str, pid: int | None, since: float) -> None:
    """`<what> (PID <pid>) in <seconds> s`: the line a local server logs when its start ends,
    `since` being the `time.monotonic()` its start began at."""
    logger.info("%s (PID %s) in %.1f s", what, pid, time.monotonic() - since)


class StartedOnEnter(ABC):
    """A context manager that calls `start()` on enter and `stop()` on exit."""

    @abstractmethod
    def start(self) -> object: ...

    @abstractmethod
    def stop(self) -> None: ...

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()
