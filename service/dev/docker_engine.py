"""A Docker engine for the container tests, the Testcontainers Kafka and image builds.

The engine that already answers is used as it is and left alone: `DOCKER_HOST` if set, else the
default socket (a developer's Docker, a CI runner's). When none answers and we may (root, with
`dockerd` installed), a private engine is started: `dockerd` with its data root in the cache
(images survive between runs, see service/dev/images.py) and its exec root, pid file and socket in
a temp dir, listening only on that socket. It is stopped again, by the PID in its pid file, when
the last session using it ends; sessions share it through file locks, so two test runs at once
neither start two engines on one data root nor stop the engine under each other.

The private engine keeps all container traffic on this machine: published ports bind 127.0.0.1
only, and with IP forwarding, masquerading and iptables rules off a container reaches the host and
the other containers on the engine's own bridge and nothing beyond it.

    with docker_engine() as engine, engine_environment(engine):
        ...  # DOCKER_HOST names the engine; docker-py and Testcontainers find it
"""

from __future__ import annotations

import fcntl
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Literal

from service.dev.environ import patched_environ
from service.dev.file_lock import exclusive_lock
from service.dev.files import FileIn
from service.dev.processes import signal_pid
from service.errors import DStreamsError

DOCKER_HOST_ENV = "DOCKER_HOST"
DEFAULT_DOCKER_HOST = "unix:///var/run/docker.sock"
# "never" forbids starting a private engine (use only one that answers).
START_ENV = "DSTREAMS_DOCKER_START"

# dockerd and its containerd answer in 2-5 s on an idle machine; a loaded 2-core runner, or a
# first start that creates the data root, needs more.
START_TIMEOUT_S = 90.0
# dockerd stops the containers still running (each gets its own stop timeout, 10 s by default)
# before it exits; this bounds the whole shutdown before it is killed.
STOP_TIMEOUT_S = 40.0
PING_TIMEOUT_S = 2.0
_LOG_TAIL_LINES = 30

# Where the private engine publishes container ports.
PUBLISHED_ADDRESS = "127.0.0.1"
# Settings of the private engine (see the module docstring for why).
_DOCKERD_FLAGS = (
    "--iptables=false",
    "--ip-forward=false",
    "--ip-masq=false",
    f"--ip={PUBLISHED_ADDRESS}",
    "--log-level=warn",
)

Action = Literal["use", "join", "start"]


class DockerEngineError(DStreamsError):
    """No Docker engine answers and none could be started, or the one started failed."""


@dataclass(frozen=True)
class EngineLayout:
    """Where a private engine keeps its files: images in `data_root`, runtime files in `run_dir`."""

    data_root: Path
    run_dir: Path

    @classmethod
    def default(cls, environ: Mapping[str, str] = os.environ) -> EngineLayout:
        cache = Path(environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
        # Unix socket paths are limited to ~108 bytes, and containerd puts its own sockets under
        # the exec root: a short temp path, one per user.
        run_dir = Path(tempfile.gettempdir()) / f"dstreams-docker-{os.geteuid()}"
        return cls(data_root=cache / "dstreams" / "docker", run_dir=run_dir)

    socket = FileIn("run_dir", "docker.sock")
    exec_root = FileIn("run_dir", "exec")
    pidfile = FileIn("run_dir", "dockerd.pid")
    log = FileIn("run_dir", "dockerd.log")
    config_file = FileIn("run_dir", "daemon.json")

    @property
    def docker_host(self) -> str:
        return f"unix://{self.socket}"

    def dockerd_argv(self, dockerd: str) -> list[str]:
        """The private engine's command line."""
        return [
            dockerd,
            # Our own (empty) config file: the machine's /etc/docker/daemon.json is for its own
            # engine, and a setting there that repeats one of our flags would stop dockerd.
            f"--config-file={self.config_file}",
            f"--data-root={self.data_root}",
            f"--exec-root={self.exec_root}",
            f"--pidfile={self.pidfile}",
            f"--host={self.docker_host}",
            *_DOCKERD_FLAGS,
        ]


@dataclass(frozen=True)
class EnginePlan:
    """What to do for an engine (`plan_engine`), at `docker_host`.

    `use` an engine that answers there (the one `DOCKER_HOST` names, or the default one); `join`
    our private engine that another session started; `start` the private engine."""

    action: Action
    docker_host: str


@dataclass(frozen=True)
class DockerEngine:
    """An engine that answers at `docker_host`; `private_dir` is set when it is our own."""

    docker_host: str
    private_dir: Path | None = None

    @property
    def private(self) -> bool:
        return self.private_dir is not None

    def environment(self) -> dict[str, str]:
        """Variables that point docker-py and Testcontainers at this engine.

        The private engine pulls nothing, so no registry credentials are read for it (an empty
        client config), and Testcontainers' reaper (Ryuk, an image from a public registry) is off:
        containers are removed by the fixtures that start them, and whatever a killed session left
        is removed when the engine next starts. Its published ports are on 127.0.0.1, which
        Testcontainers is told directly: on a machine that looks like a container to it (a
        /.dockerenv file), it would otherwise reach for the bridge's gateway address.
        """
        environment = {DOCKER_HOST_ENV: self.docker_host}
        if self.private_dir is not None:
            environment["DOCKER_CONFIG"] = str(self.private_dir / "client-config")
            environment["TESTCONTAINERS_RYUK_DISABLED"] = "true"
            environment["TC_HOST"] = PUBLISHED_ADDRESS
            environment["TESTCONTAINERS_CONNECTION_MODE"] = "docker_host"
        return environment


# --- The decision -----------------------------------------------------------------------------


def plan_engine(
    environ: Mapping[str, str],
    answers: Callable[[str], bool],
    layout: EngineLayout,
    start_refusal: str | None,
) -> EnginePlan:
    """Which engine to use. `start_refusal` says why we may not start one (None: we may).

    `DOCKER_HOST` names the engine to use when set; it is never replaced by another, except when
    it names our private engine's socket (exported by an outer session that has since ended).
    """
    named = environ.get(DOCKER_HOST_ENV, "").strip()
    if named and named != layout.docker_host:
        if answers(named):
            return EnginePlan("use", named)
        msg = (
            f"expected the Docker engine named by {DOCKER_HOST_ENV}={named} to answer, but it "
            f"did not: start that engine, or unset {DOCKER_HOST_ENV} to use the default one."
        )
        raise DockerEngineError(msg)
    if not named and answers(DEFAULT_DOCKER_HOST):
        return EnginePlan("use", DEFAULT_DOCKER_HOST)
    if answers(layout.docker_host):
        return EnginePlan("join", layout.docker_host)
    if start_refusal is not None:
        msg = (
            f"expected a Docker engine, but none answered ({DEFAULT_DOCKER_HOST} or "
            f"{DOCKER_HOST_ENV}) and none can be started here: {start_refusal}."
        )
        raise DockerEngineError(msg)
    return EnginePlan("start", layout.docker_host)


def start_refusal(environ: Mapping[str, str], euid: int, dockerd: str | None) -> str | None:
    """Why a private engine may not be started here, or None when it may."""
    if environ.get(START_ENV, "").strip().lower() == "never":
        return f"{START_ENV}=never forbids it"
    if euid != 0:
        return "starting dockerd needs root; start Docker yourself or run as root"
    if dockerd is None:
        return (
            "no `dockerd` on PATH; install Debian's docker.io (`make sysdeps` does) or start "
            "Docker yourself"
        )
    return None


# --- Talking to an engine ---------------------------------------------------------------------


def docker_sdk() -> Any:
    """The docker-py module, imported on first use (a dev dependency, absent from the image)."""
    import docker  # type: ignore[import-untyped]  # docker-py ships no type information

    return docker


def docker_client(docker_host: str, timeout_s: float = 600) -> Any:
    """A docker-py `DockerClient` for the engine at `docker_host`; close it after use."""
    return docker_sdk().DockerClient(base_url=docker_host, timeout=timeout_s)


def engine_answers(docker_host: str, timeout_s: float = PING_TIMEOUT_S) -> bool:
    """True when the engine at `docker_host` answers a ping."""
    if docker_host.startswith("unix://") and not Path(docker_host[7:]).exists():
        return False  # no socket: skip docker-py's connection attempt
    docker = docker_sdk()
    try:
        client = docker.APIClient(base_url=docker_host, timeout=timeout_s)
    except docker.errors.DockerException:
        return False
    try:
        return bool(client.ping())
    except (docker.errors.DockerException, OSError, ValueError):
        return False
    finally:
        client.close()


# --- The engine -------------------------------------------------------------------------------


@contextmanager
def docker_engine(
    environ: Mapping[str, str] = os.environ, layout: EngineLayout | None = None
) -> Iterator[DockerEngine]:
    """Yield an engine that answers: the one running, else the private one (joined or started)."""
    layout = layout or EngineLayout.default(environ)
    dockerd = shutil.which("dockerd")
    refusal = start_refusal(environ, os.geteuid(), dockerd)
    plan = plan_engine(environ, engine_answers, layout, refusal)
    if plan.action == "use":
        yield DockerEngine(plan.docker_host)
        return
    assert dockerd is not None  # noqa: S101 - plan_engine refuses "start" without dockerd
    with _private_engine(layout, dockerd):
        yield DockerEngine(layout.docker_host, private_dir=layout.run_dir)


def engine_environment(engine: DockerEngine) -> AbstractContextManager[None]:
    """Set the engine's variables in os.environ for the duration, then restore them."""
    return patched_environ(engine.environment())


@contextmanager
def _private_engine(layout: EngineLayout, dockerd: str) -> Iterator[None]:
    _make_private_dir(layout.run_dir)
    (layout.run_dir / "client-config").mkdir(exist_ok=True)
    layout.data_root.mkdir(parents=True, exist_ok=True)
    users = (layout.run_dir / "users.lock").open("a")
    try:
        with exclusive_lock(layout.run_dir / "start.lock"):
            if not engine_answers(layout.docker_host):
                _start_dockerd(layout, dockerd)
            fcntl.flock(users, fcntl.LOCK_SH)
        yield
    finally:
        with exclusive_lock(layout.run_dir / "start.lock"):
            if _last_user(users):
                stop_private_engine(layout)
        users.close()


def _last_user(users: IO[str]) -> bool:
    # Every session holds the users lock shared; only the last one can turn it exclusive.
    try:
        fcntl.flock(users, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def _make_private_dir(path: Path) -> None:
    # The run dir lives in a shared /tmp: refuse one another user made or a symlink planted there.
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    info = path.lstat()
    if path.is_symlink() or info.st_uid != os.geteuid():
        msg = (
            f"expected {path} to be a directory owned by uid {os.geteuid()}, found a "
            f"{'symlink' if path.is_symlink() else f'directory of uid {info.st_uid}'}; "
            "remove it and retry."
        )
        raise DockerEngineError(msg)


# Popen objects of the engines this process started: kept so that they are not reported as
# leaked while the engine runs; the PID in the pid file is what stops it.
_STARTED: dict[int, subprocess.Popen[bytes]] = {}


def _start_dockerd(layout: EngineLayout, dockerd: str) -> None:
    # An engine of a killed session that no longer answers still holds the pid file (and with
    # it the data root): stop it first, or the new dockerd refuses to start.
    stop_private_engine(layout)
    layout.config_file.write_text("{}\n")
    with layout.log.open("wb") as log:  # one start per log: it stays small
        process = subprocess.Popen(  # noqa: S603 - fixed argv, no shell
            layout.dockerd_argv(dockerd),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            # Its own session: a Ctrl-C of the tests must not kill the engine under the
            # containers it runs; the context manager stops it in order.
            start_new_session=True,
        )
    _STARTED[process.pid] = process
    _wait_until_answering(layout, process)
    _remove_stopped_containers(layout.docker_host)


def _wait_until_answering(layout: EngineLayout, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while not engine_answers(layout.docker_host):
        exited = process.poll() is not None
        if exited or time.monotonic() > deadline:
            # Its containerd dies with it (dockerd starts it with a parent-death signal).
            signal_pid(process.pid, signal.SIGKILL)
            process.wait()
            _STARTED.pop(process.pid, None)
            msg = (
                f"expected dockerd (PID {process.pid}) to answer on {layout.socket} within "
                f"{START_TIMEOUT_S:.0f}s, but it "
                f"{f'exited with {process.returncode}' if exited else 'did not'}. "
                f"Its log ({layout.log}) ends:\n{_log_tail(layout.log)}"
            )
            raise DockerEngineError(msg)
        time.sleep(0.2)


def _remove_stopped_containers(docker_host: str) -> None:
    # The engine was down, so every container it holds was left by a session that died; its
    # names and published ports would otherwise pile up.
    client = docker_client(docker_host, timeout_s=60)
    try:
        client.containers.prune()
    finally:
        client.close()


def stop_private_engine(layout: EngineLayout) -> None:
    """Stop the private engine by the PID in its pid file (SIGTERM, then SIGKILL)."""
    pid = _private_engine_pid(layout)
    if pid is None:
        return
    signal_pid(pid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_TIMEOUT_S
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    if _alive(pid):
        signal_pid(pid, signal.SIGKILL)
        while _alive(pid):
            time.sleep(0.1)
    _STARTED.pop(pid, None)
    layout.socket.unlink(missing_ok=True)


def _private_engine_pid(layout: EngineLayout) -> int | None:
    """The PID in the pid file, if that process is the dockerd started with this layout."""
    try:
        pid = int(layout.pidfile.read_text().strip())
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except (OSError, ValueError):
        return None
    # A stale pid file can name a PID reused by an unrelated process: never signal that one.
    if f"--pidfile={layout.pidfile}".encode() not in cmdline:
        return None
    return pid


def _alive(pid: int) -> bool:
    """True while `pid` runs; reaps it when it is our child (it is when we started it)."""
    try:
        reaped, _ = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        reaped = 0  # not our child: its parent reaps it
    if reaped == pid:
        return False
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def _log_tail(path: Path) -> str:
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return "(no log written)"
    return "\n".join(lines[-_LOG_TAIL_LINES:])
