"""Shared-storage rules: on a cluster, what executors write must be where every executor sees it.

A files sink's part files and the checkpoints of stateful operators are written by executors,
wherever their tasks run, and read back by the driver (and by later tasks). In local mode every
task runs in the driver's process, so any path works. On a cluster a path must be one that every
executor and the driver resolve to the same storage:

1. never relative: each executor runs in a working directory of its own;
2. never in a host's own scratch space (`/tmp`, `/var/tmp`, `/dev/shm`, `/run`) unless every
   executor runs on this very host (local mode, or a standalone master on loopback): elsewhere
   each host, or each pod, has its own;
3. a URI only where the writer understands it: checkpoints may go to a Hadoop-compatible file
   system (`hdfs://`, `s3a://`, ...), the files sink writes through the local file system and
   needs a mounted path (`file://` is read as one).

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

from service.config.masters import SparkMaster

HOST_LOCAL_DIRS = ("/tmp", "/var/tmp", "/dev/shm", "/run")  # noqa: S108 - names, not used as paths
_SCHEME = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*)://")
_WHAT_TO_DO = (
    "give an absolute path on storage that the driver and every executor mount (a ReadWriteMany "
    "volume, NFS)"
)


def shared_path_problem(
    setting: str, path: str, master: SparkMaster, *, uris: bool = False
) -> str | None:
    """Why `path` (the value of `setting`) cannot be shared by `master`'s executors, or None.

    `uris`: whether the writer accepts a Hadoop-compatible URI (checkpoints do, files do not).
    """
    if master.is_local:
        return None
    scheme = _SCHEME.match(path)
    if scheme is not None and scheme["scheme"].lower() != "file":
        if uris:
            return None
        return (
            f"{setting}: {path!r} is a {scheme['scheme']}:// URI, but this writer uses the local "
            f"file system; {_WHAT_TO_DO}"
        )
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
