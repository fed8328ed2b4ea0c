"""A throwaway S3-compatible server for tests: SeaweedFS's `weed server -s3` on loopback.

``LocalS3`` starts the one `weed` process (master, volume server, filer and S3 gateway inside)
itself, so it knows the server's PID and stops exactly that process. Its data lives in a fresh
temp dir, every port it opens is a free loopback port, its telemetry is off (it reaches nothing
outside this machine), and its only identity is an admin with the throwaway keys below. The
binary is built by `devtools/ensure-seaweedfs.sh` (`make sysdeps`) into ~/.cache/dstreams/bin.

    with LocalS3() as s3:
        boto3.client("s3", endpoint_url=s3.endpoint_url, ...).list_objects_v2(Bucket=s3.bucket)
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from service.dev.ports import free_port
from service.dev.processes import StartedOnEnter, die_with_parent, log_started, stop_escalating
from service.errors import DStreamsError

log = logging.getLogger(__name__)

ACCESS_KEY_ID = "dstreams-test"
SECRET_ACCESS_KEY = "dstreams-test-secret"  # noqa: S105 - a throwaway server's key, on loopback
REGION = "us-east-1"
# The master, volume server, filer and S3 gateway each listen on an HTTP and a gRPC port.
_PORT_NAMES = ("master", "volume", "filer", "s3")
# weed puts a Unix socket for each of its gRPC ports here, whatever its flags say.
_GRPC_SOCKETS = Path("/tmp")  # noqa: S108 - weed's own fixed place, cleaned of our sockets only
# Start-up (the master's election, the filer, the gateway) takes a few seconds on a busy machine.
_READY_TIMEOUT_S = 90.0


class S3ServerError(DStreamsError):
    """The local S3 server could not be started or stopped."""


def find_weed() -> Path:
    """The `weed` binary: DSTREAMS_WEED, else the one devtools/ensure-seaweedfs.sh builds."""
    named = os.environ.get("DSTREAMS_WEED")
    cache = Path(os.environ.get("DSTREAMS_TOOLS_CACHE", Path.home() / ".cache" / "dstreams"))
    weed = Path(named) if named else cache / "bin" / "weed"
    if not os.access(weed, os.X_OK):
        msg = (
            f"expected SeaweedFS's weed binary at {weed}, found none; build it with "
            "`bash devtools/ensure-seaweedfs.sh` (`make sysdeps` does), or set DSTREAMS_WEED"
        )
        raise S3ServerError(msg)
    return weed


class LocalS3(StartedOnEnter):
    """One throwaway S3 server in a temp dir, with `bucket` created; a context manager."""

    def __init__(self, bucket: str = "dstreams-test", weed: Path | None = None) -> None:
        self.bucket = bucket
        self._weed = weed
        self.base_dir: Path | None = None
        self.ports: dict[str, int] = {}
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    @property
    def endpoint_url(self) -> str:
        if "s3" not in self.ports:
            msg = "expected a started server, found none; call start() or use `with` first"
            raise S3ServerError(msg)
        return f"http://127.0.0.1:{self.ports['s3']}"

    @property
    def credentials(self) -> dict[str, str]:
        """The environment a client of this server needs: its keys and region."""
        return {
            "AWS_ACCESS_KEY_ID": ACCESS_KEY_ID,
            "AWS_SECRET_ACCESS_KEY": SECRET_ACCESS_KEY,
            "AWS_REGION": REGION,
        }

    def client(self) -> Any:
        """A boto3 client of this server (path-style, the throwaway keys)."""
        return boto3.client(
            "s3",
            endpoint_url=self.endpoint_url,
            aws_access_key_id=ACCESS_KEY_ID,
            aws_secret_access_key=SECRET_ACCESS_KEY,
            region_name=REGION,
            config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1}),
        )

    def start(self) -> LocalS3:
        """Start the server on free loopback ports and wait until the bucket is created."""
        if self._proc is not None:
            msg = f"expected a stopped server, found one running with PID {self._proc.pid}"
            raise S3ServerError(msg)
        weed = self._weed or find_weed()
        started = time.monotonic()
        self.base_dir = Path(tempfile.mkdtemp(prefix="dstreams-s3-"))
        try:
            self._launch(weed)
            self._create_bucket_when_ready()
        except BaseException:
            self.stop()
            raise
        log_started(log, f"SeaweedFS S3 started at {self.endpoint_url}", self.pid, started)
        return self

    def _launch(self, weed: Path) -> None:
        base = self._require_base()
        (base / "data").mkdir()
        self.ports = _free_ports([f"{n}{kind}" for n in _PORT_NAMES for kind in ("", ".grpc")])
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(base)}
        env.update(self.credentials)  # the server's admin identity
        with open(base / "weed.log", "ab") as out:
            self._proc = subprocess.Popen(  # noqa: S603 - our binary, fixed arguments, no shell
                [str(weed), *_server_args(base, self.ports)],
                cwd=base,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=die_with_parent,
            )

    def _create_bucket_when_ready(self) -> None:
        """Creates the bucket, retrying while the server comes up (refused connections, 503s
        while the filer or the master's election is not there yet)."""
        deadline = time.monotonic() + _READY_TIMEOUT_S
        client = self.client()
        while True:
            self._check_running()
            try:
                client.create_bucket(Bucket=self.bucket)
                client.head_bucket(Bucket=self.bucket)
                return
            except (BotoCoreError, ClientError) as error:
                if time.monotonic() > deadline:
                    msg = (
                        f"expected the S3 server to create bucket {self.bucket!r} within "
                        f"{_READY_TIMEOUT_S:.0f} s, it did not ({error}); its log follows:\n"
                        f"{self.log_tail()}"
                    )
                    raise S3ServerError(msg) from None
                time.sleep(0.2)

    def _check_running(self) -> None:
        if self._proc is not None and self._proc.poll() is not None:
            msg = (
                f"expected the S3 server to keep running, it exited with "
                f"{self._proc.returncode}; its log follows:\n{self.log_tail()}"
            )
            raise S3ServerError(msg)

    def _require_base(self) -> Path:
        if self.base_dir is None:
            msg = "expected a started server, found none; call start() first"
            raise S3ServerError(msg)
        return self.base_dir

    def log_tail(self, lines: int = 30) -> str:
        path = self._require_base() / "weed.log"
        try:
            return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return f"(no log at {path})"

    def stop(self) -> None:
        """Stop the server this object started (by PID) and delete its files."""
        proc, self._proc = self._proc, None
        if proc is not None:
            # SIGKILL at once: its files are deleted next, so there is nothing to flush, and a
            # graceful stop spends 15 s trying to flush the filer's own log to the volume server
            # it has already stopped.
            stop_escalating(proc, "SeaweedFS", ())
        if self.base_dir is not None:
            shutil.rmtree(self.base_dir, ignore_errors=True)
            self.base_dir = None
        for name, port in self.ports.items():
            if name.endswith(".grpc"):
                _GRPC_SOCKETS.joinpath(f"seaweedfs-{name[:-5]}-grpc-{port}.sock").unlink(
                    missing_ok=True
                )
        self.ports = {}


def _free_ports(names: list[str]) -> dict[str, int]:
    """A distinct free loopback port for each name."""
    ports: dict[str, int] = {}
    while len(ports) < len(names):
        port = free_port()
        if port not in ports.values():
            ports[names[len(ports)]] = port
    return ports


def _server_args(base: Path, ports: dict[str, int]) -> list[str]:
    """`weed server` with the S3 gateway, bound to loopback, on `ports`, its data in `base`."""
    data = base / "data"
    args = ["server", "-ip=127.0.0.1", "-ip.bind=127.0.0.1", f"-dir={data}", "-filer", "-s3"]
    for name in _PORT_NAMES:
        args += [f"-{name}.port={ports[name]}", f"-{name}.port.grpc={ports[name + '.grpc']}"]
    return [
        *args,
        # Nothing leaves this machine: no usage report, no Iceberg or Lance listener.
        "-master.telemetry=false",
        "-s3.port.iceberg=0",
        "-s3.port.lance=0",
        # Small volumes in a temp dir, and no wait before a stop.
        "-master.volumeSizeLimitMB=64",
        "-volume.max=16",
        "-volume.preStopSeconds=0",
        f"-filer.localSocket={base / 'filer.sock'}",
        f"-s3.localSocket={base / 's3.sock'}",
    ]
