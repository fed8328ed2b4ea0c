"""Shared-storage rules: on a cluster, what executors write must be where every executor sees it.

A files sink's part files and the checkpoints of stateful operators are written by executors,
wherever their tasks run, and read back by the driver (and by later tasks). In local mode every
task runs in the driver's process, so any path works. On a cluster a path must be one that every
executor and the driver resolve to the same storage:

1. never relative: each executor runs in a working directory of its own;
2. never in a host's own scratch space (`/tmp`, `/var/tmp`, `/dev/shm`, `/run`) unless every
   executor runs on this very host (local mode, or a standalone master on loopback): elsewhere
   each host, or each pod, has its own;
3. a URI only where the writer understands it: checkpoints may go to S3-compatible object
   storage (`s3://` or `s3a://`, reached as `checkpoint.s3` says); the files sink writes through
   the local file system and needs a mounted path (`file://` is read as one), on any master.

The files sink refuses object storage even in local mode: its exactly-once rests on the first
complete copy of a part winning over a retried or speculative task's copy, which a rename gives on
a file system; on S3 that needs a conditional write (`If-None-Match: *`) that not every
S3-compatible server honours, and dstreams does not check that it does.

>>> from service.config.masters import parse_master
>>> shared_path_problem("sinks.out.path", "out", parse_master("spark://10.0.0.5:7077"))
... # doctest: +ELLIPSIS
"sinks.out.path: 'out' is a relative path, but on a cluster (spark://10.0.0.5:7077) ..."
>>> shared_path_problem("sinks.out.path", "out", parse_master("local[2]")) is None
True
"""

from __future__ import annotations

import os
import posixpath
import re
import tempfile
from pathlib import Path

from pydantic import Field, field_validator

from service.config.masters import SparkMaster
from service.config.model import ConfigModel

HOST_LOCAL_DIRS = ("/tmp", "/var/tmp", "/dev/shm", "/run")  # noqa: S108 - names, not used as paths
_SCHEME = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*)://")
OBJECT_STORAGE_SCHEMES = ("s3", "s3a")
"""URI schemes of the checkpoint store on object storage (`service.graph.checkpoint_s3`)."""
_WHAT_TO_DO = (
    "give an absolute path on storage that the driver and every executor mount (a ReadWriteMany "
    "volume, NFS)"
)


def shared_path_problem(
    setting: str, path: str, master: SparkMaster, *, uris: bool = False
) -> str | None:
    """Why `path` (the value of `setting`) cannot be shared by `master`'s executors, or None.

    `uris`: whether the writer accepts an object-storage URI (checkpoints do, files do not).
    """
    scheme = _SCHEME.match(path)
    if scheme is not None and scheme["scheme"].lower() != "file":
        return _uri_problem(setting, path, scheme["scheme"].lower(), uris=uris)
    if master.is_local:
        return None
    local = path[len("file://") :] if scheme is not None else path
    if not posixpath.isabs(local):
        return (
            f"{setting}: {path!r} is a relative path, but on a cluster ({master.url}) each "
            f"executor runs in a working directory of its own; {_WHAT_TO_DO}"
            + (", or a Hadoop-compatible URI" if uris else "")
        )
    scratch = _host_local_dir(local)
    if scratch is not None and not master.on_this_host:
        return (
            f"{setting}: {path!r} is under {scratch}, which each host (each pod) has its own copy "
            f"of, so the executors of {master.url} would not see each other's files; {_WHAT_TO_DO}"
        )
    return None


def on_object_storage(path: str) -> bool:
    """Whether `path` is an object-storage URI (s3:// or s3a://).

    >>> on_object_storage("s3a://state/ckpt"), on_object_storage("/var/lib/dstreams/ckpt")
    (True, False)
    """
    scheme = _SCHEME.match(path)
    return scheme is not None and scheme["scheme"].lower() in OBJECT_STORAGE_SCHEMES


def _uri_problem(setting: str, path: str, scheme: str, *, uris: bool) -> str | None:
    """Why the writer of `setting` cannot use the URI `path`, or None; on any master."""
    if uris and scheme in OBJECT_STORAGE_SCHEMES:
        return None
    if uris:
        return (
            f"{setting}: {path!r} is a {scheme}:// URI, but checkpoints go to a mounted path or "
            f"to S3-compatible object storage (s3://BUCKET/PREFIX or s3a://...); {_WHAT_TO_DO}"
        )
    if scheme in OBJECT_STORAGE_SCHEMES:
        return (
            f"{setting}: {path!r} is on object storage, but the files sink writes through the "
            "local file system and refuses S3: a retried or speculative task's copy of a part "
            "could replace the first one there, since no conditional write (If-None-Match) is "
            "checked; give a mounted "
            "path (on a cluster, a ReadWriteMany volume or NFS), or write the output to "
            "PostgreSQL or Kafka"
        )
    return (
        f"{setting}: {path!r} is a {scheme}:// URI, but this writer uses the local file "
        f"system; {_WHAT_TO_DO}"
    )


def _host_local_dir(path: str) -> str | None:
    normal = posixpath.normpath(path)
    for folder in (*HOST_LOCAL_DIRS, tempfile.gettempdir()):
        if normal == folder or normal.startswith(folder.rstrip("/") + "/"):
            return folder
    return None


def writable_problem(setting: str, path: str, *, folder: bool = True) -> str | None:
    """Why this process cannot write at local `path` (the value of `setting`), or None.

    `folder`: `path` is a folder (else a file, which must be writable if it exists). A path that
    does not exist yet is created by its writer, so its nearest existing ancestor must be a
    writable folder. URIs other than `file://` are left to their file system.
    """
    scheme = _SCHEME.match(path)
    if scheme is not None and scheme["scheme"].lower() != "file":
        return None
    local = Path(path[len(scheme[0]) :] if scheme is not None else path).absolute()
    existing = next(p for p in (local, *local.parents) if p.exists())
    if existing == local and not folder and existing.is_file():
        return None if os.access(existing, os.W_OK) else _unwritable(setting, existing, path)
    if not existing.is_dir():
        return f"{setting}: {existing} is a file, where {path!r} needs a folder"
    if not os.access(existing, os.W_OK | os.X_OK):
        return _unwritable(setting, existing, path)
    return None


def _unwritable(setting: str, existing: Path, path: str) -> str:
    return (
        f"{setting}: {existing} is not writable by this user (uid {os.getuid()}), so {path!r} "
        "cannot be written; fix the owner or mode of the folder, or the setting"
    )


class S3Settings(ConfigModel):
    """How the checkpoint store reaches S3-compatible object storage (`checkpoint.path:
    s3://BUCKET/PREFIX`, or `s3a://`). Credentials are never settings: every process (the
    driver and each executor) finds them itself, in `credentials_file` when set, else in the
    environment (AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN) or the pod's
    role (IRSA); so they are never pickled into tasks, logged or shown."""

    endpoint_url: str | None = Field(default=None, pattern=r"^https?://[^/\s]+/?$")
    """The server's URL, e.g. http://minio.storage:9000; null: AWS_ENDPOINT_URL_S3 (or
    AWS_ENDPOINT_URL) when set, else AWS S3 in `region`."""
    region: str | None = None
    """Signing region; null: AWS_REGION (or AWS_DEFAULT_REGION), else us-east-1."""
    path_style: bool = False
    """Address the bucket in the path (http://host/BUCKET/key) rather than the host name:
    true for most self-hosted servers (MinIO, SeaweedFS, Ceph RGW without wildcard DNS)."""
    credentials_file: Path | None = None
    """An AWS shared-credentials file (`[default]` with aws_access_key_id and
    aws_secret_access_key), e.g. a mounted Kubernetes Secret; it must be at this path on the
    driver and every executor. null: the environment or the pod's role."""

    @field_validator("credentials_file")
    @classmethod
    def _credentials_readable(cls, path: Path | None) -> Path | None:
        if path is not None and not path.is_file():
            msg = (
                f"{path} is not a readable file; mount the Secret holding the AWS "
                "shared-credentials file there, or leave credentials_file null to take "
                "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY from the environment"
            )
            raise ValueError(msg)
        return path
