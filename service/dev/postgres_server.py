"""A throwaway PostgreSQL server for tests and demos, started from Debian's `postgresql` binaries.

``LocalPostgres`` runs ``initdb`` and then ``postgres`` itself (not through ``pg_ctl``), so it knows
the server's PID and stops exactly that process. The server lives in a fresh temp dir, listens on a
free loopback port with trust authentication for 127.0.0.1 only, and keeps its Unix socket in that
dir. PostgreSQL refuses to run as root, so under euid 0 the server runs as the ``postgres`` system
user that the Debian package creates.

    with LocalPostgres() as pg:
        psycopg.connect(pg.dsn)

For a test of an outage, ``stop_server()`` stops the server process alone (its data dir and port
stay) and ``restart_server()`` starts it again on the same port.
"""

from __future__ import annotations

import contextlib
import glob
import logging
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg

from service.dev.ports import free_port
from service.dev.processes import StartedOnEnter, log_started, stop_escalating
from service.errors import DStreamsError

log = logging.getLogger(__name__)

_BIN_GLOB = "/usr/lib/postgresql/*/bin"
_SERVER_USER = "postgres"
# Start-up normally takes well under two seconds here; the limit only has to catch a hung server.
_READY_TIMEOUT_S = 60.0
_PORT_ATTEMPTS = 3
# A fast shutdown (SIGINT) aborts open transactions and returns in well under a second.
_STOP_TIMEOUT_S = 30.0
# A throwaway server needs no durability; these settings make initdb and commits much faster.
_SERVER_SETTINGS = {
    "listen_addresses": "127.0.0.1",
    "fsync": "off",
    "synchronous_commit": "off",
    "full_page_writes": "off",
    "max_connections": "100",
    "logging_collector": "off",
}


class PostgresServerError(DStreamsError):
    """The local PostgreSQL server could not be started or stopped."""


def find_bin_dir() -> Path:
    """The bin dir of the highest installed Debian PostgreSQL major version."""
    candidates = [Path(p) for p in glob.glob(_BIN_GLOB) if (Path(p) / "initdb").exists()]
    if not candidates:
        msg = (
            f"expected PostgreSQL server binaries (initdb, postgres) under {_BIN_GLOB}, found "
            "none; install Debian's `postgresql` package (`apt-get install postgresql`, which "
            "`make test` does via devtools/ensure-sysdeps.sh) or set POSTGRES_DSN to a server"
        )
        raise PostgresServerError(msg)
    return max(candidates, key=lambda p: _major_version(p.parent.name))


def _major_version(name: str) -> tuple[int, ...]:
    parts = name.split(".")
    return tuple(int(x) for x in parts if x.isdigit())


class _RunAs:
    """The uid/gid to run the server as: ourselves, or the `postgres` user when we are root."""

    def __init__(self) -> None:
        self.uid: int | None = None
        self.gid: int | None = None
        if os.geteuid() != 0:
            return
        try:
            entry = pwd.getpwnam(_SERVER_USER)
        except KeyError:
            msg = (
                f"running as root, PostgreSQL must run as an unprivileged user, expected the "
                f"system user {_SERVER_USER!r} (created by Debian's `postgresql` package), found "
                "none; install that package or run the tests as a non-root user"
            )
            raise PostgresServerError(msg) from None
        self.uid, self.gid = entry.pw_uid, entry.pw_gid

    def chown(self, path: Path) -> None:
        if self.uid is not None and self.gid is not None:
            os.chown(path, self.uid, self.gid)

    def popen(self, args: list[str], cwd: Path, log_path: Path) -> subprocess.Popen[bytes]:
        """Start `args` as the server user; output goes to `log_path`."""
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LC_ALL": "C", "HOME": str(cwd)}
        with open(log_path, "ab") as out:
            # extra_groups=[] drops root's supplementary groups along with its uid.
            return subprocess.Popen(  # noqa: S603 - fixed binary paths, no shell
                args,
                cwd=cwd,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                user=self.uid,
                group=self.gid,
                extra_groups=[] if self.uid is not None else None,
                start_new_session=True,
            )


class LocalPostgres(StartedOnEnter):
    """One throwaway PostgreSQL server in a temp dir; a context manager (start on enter)."""

    def __init__(self, bin_dir: Path | None = None, user: str = "postgres") -> None:
        self._bin_dir = bin_dir
        self.user = user
        self.base_dir: Path | None = None
        self.port: int | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._stopped_port: int | None = None

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    @property
    def socket_dir(self) -> Path:
        return self._require_base() / "sock"

    @property
    def log_path(self) -> Path:
        return self._require_base() / "server.log"

    @property
    def dsn(self) -> str:
        """A libpq connection string for the running server (TCP on 127.0.0.1, no password)."""
        if self.port is None or self._proc is None:
            msg = "expected a started server, found none; call start() or use `with` first"
            raise PostgresServerError(msg)
        return f"host=127.0.0.1 port={self.port} user={self.user} dbname=postgres"

    def start(self) -> LocalPostgres:
        """Create a data dir, start the server and wait until it accepts connections."""
        if self._proc is not None:
            msg = f"expected a stopped server, found one running with PID {self._proc.pid}"
            raise PostgresServerError(msg)
        bin_dir = self._bin_dir or find_bin_dir()
        run_as = _RunAs()
        started = time.monotonic()
        self.base_dir = Path(tempfile.mkdtemp(prefix="dstreams-pg-"))
        try:
            self._init_data_dir(bin_dir, run_as)
            self._launch_until_ready(bin_dir, run_as)
        except BaseException:
            self.stop()
            raise
        log_started(log, f"PostgreSQL started on 127.0.0.1:{self.port}", self.pid, started)
        return self

    def _require_base(self) -> Path:
        if self.base_dir is None:
            msg = "expected a started server, found none; call start() first"
            raise PostgresServerError(msg)
        return self.base_dir

    def _init_data_dir(self, bin_dir: Path, run_as: _RunAs) -> None:
        base = self._require_base()
        self.socket_dir.mkdir()
        for path in (base, self.socket_dir):
            run_as.chown(path)
        args = [str(bin_dir / "initdb"), "-D", str(base / "data"), "-U", self.user]
        args += ["--auth=trust", "--encoding=UTF8", "--no-locale", "--no-sync"]
        proc = run_as.popen(args, cwd=base, log_path=base / "initdb.log")
        if proc.wait() != 0:
            msg = (
                f"expected initdb to succeed, it exited with {proc.returncode}; "
                f"its output follows:\n{_tail(base / 'initdb.log')}"
            )
            raise PostgresServerError(msg)
        # Trust only loopback TCP and our own private socket dir; nothing else may connect.
        hba = "local all all trust\nhost all all 127.0.0.1/32 trust\n"
        (base / "data" / "pg_hba.conf").write_text(hba)

    def _launch_until_ready(self, bin_dir: Path, run_as: _RunAs) -> None:
        # The free port can be taken by another process before the server binds it; try another.
        for attempt in range(1, _PORT_ATTEMPTS + 1):
            proc = self._launch(bin_dir, run_as)
            try:
                self._wait_ready(proc)
                return
            except PostgresServerError:
                port_taken = "could not bind" in _tail(self.log_path)
                if not port_taken or attempt == _PORT_ATTEMPTS:
                    raise
                log.info("port %s was taken before PostgreSQL bound it; retrying", self.port)
                self.log_path.unlink(missing_ok=True)

    def stop_server(self) -> None:
        """Stop the server process (fast shutdown, by PID), keeping its data dir and port: an
        outage, ended by `restart_server()`."""
        proc, self._proc = self._proc, None
        if proc is None:
            msg = "expected a running server to stop, found none"
            raise PostgresServerError(msg)
        _stop_process(proc)
        self._stopped_port = self.port
        log.info("PostgreSQL (PID %s) stopped for an outage", proc.pid)

    def restart_server(self) -> None:
        """Start the server stopped by `stop_server()` again, on its port, with its data."""
        if self._stopped_port is None or self._proc is not None:
            msg = "expected a server stopped by stop_server(), found none"
            raise PostgresServerError(msg)
        port, self._stopped_port = self._stopped_port, None
        proc = self._launch(self._bin_dir or find_bin_dir(), _RunAs(), port)
        self._wait_ready(proc)
        log.info("PostgreSQL restarted on 127.0.0.1:%s (PID %s)", port, proc.pid)

    def _launch(
        self, bin_dir: Path, run_as: _RunAs, port: int | None = None
    ) -> subprocess.Popen[bytes]:
        base = self._require_base()
        self.port = port or free_port()
        args = [str(bin_dir / "postgres"), "-D", str(base / "data"), "-p", str(self.port)]
        args += ["-k", str(self.socket_dir)]
        for name, value in _SERVER_SETTINGS.items():
            args += ["-c", f"{name}={value}"]
        self._proc = run_as.popen(args, cwd=base, log_path=self.log_path)
        return self._proc

    def _wait_ready(self, proc: subprocess.Popen[bytes]) -> None:
        deadline = time.monotonic() + _READY_TIMEOUT_S
        while True:
            if proc.poll() is not None:
                msg = (
                    f"expected PostgreSQL to keep running, it exited with "
                    f"{proc.returncode}; its log follows:\n{_tail(self.log_path)}"
                )
                raise PostgresServerError(msg)
            try:
                with psycopg.connect(self.dsn, connect_timeout=2) as conn:
                    conn.execute("SELECT 1")
                return
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    msg = (
                        f"expected PostgreSQL to accept connections within {_READY_TIMEOUT_S:.0f}"
                        f" s, it did not; its log follows:\n{_tail(self.log_path)}"
                    )
                    raise PostgresServerError(msg) from None
                time.sleep(0.05)

    def stop(self) -> None:
        """Stop the server this object started (fast shutdown by PID) and delete its files."""
        proc, self._proc = self._proc, None
        if proc is not None:
            _stop_process(proc)
        if self.base_dir is not None:
            shutil.rmtree(self.base_dir, ignore_errors=True)
            self.base_dir = None
        self.port = None
        self._stopped_port = None


def _stop_process(proc: subprocess.Popen[bytes]) -> None:
    """SIGINT is PostgreSQL's fast shutdown; SIGQUIT its immediate one; SIGKILL the last resort."""
    stop_escalating(proc, "PostgreSQL", ((signal.SIGINT, _STOP_TIMEOUT_S), (signal.SIGQUIT, 5.0)))


def _tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return f"(no log at {path})"


@contextlib.contextmanager
def postgres_endpoint() -> Iterator[str]:
    """A DSN: `POSTGRES_DSN` when set (an external server), else a throwaway local server."""
    external = os.environ.get("POSTGRES_DSN")
    if external:
        yield external
        return
    with LocalPostgres() as server:
        yield server.dsn
