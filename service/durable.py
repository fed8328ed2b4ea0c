"""Files that survive a crash: written, fsynced, renamed into place, their directory fsynced.

A leaf module (it imports only `service.errors`), so the journal, the checkpoint store and the
sinks share one copy of the idiom. A write that fails leaves no temporary file behind, and
`naming_a_full_disk` turns running out of space into one `DiskFull` naming the path and what
was being written (docs/architecture.md, "Faults").

>>> import tempfile
>>> folder = Path(tempfile.mkdtemp())
>>> replace_durably(folder / "marker", b"done")
>>> (folder / "marker").read_bytes(), [p.name for p in folder.iterdir()]
(b'done', ['marker'])
"""

from __future__ import annotations

import errno
import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from service.errors import DiskFull

# No space left on the device, or the user's quota exhausted: either way, the volume is full.
DISK_FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})


@contextmanager
def naming_a_full_disk(path: Path, what: str) -> Iterator[None]:
    """Raises `DiskFull` naming `path` and `what` when the block runs out of space.

    >>> with naming_a_full_disk(Path("/data/j"), "appending to the journal"):
    ...     raise OSError(errno.ENOSPC, "No space left on device")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    service.errors.DiskFull: no space left for /data/j (appending to the journal): [Errno 28] ...
    """
    try:
        yield
    except OSError as exc:
        full = disk_full(path, what, exc)
        if full is None:
            raise
        raise full from exc


def disk_full(path: Path, what: str, error: OSError) -> DiskFull | None:
    """The `DiskFull` that `error` means for `path` and `what`, or None if it is not one."""
    if error.errno not in DISK_FULL_ERRNOS:
        return None
    msg = (
        f"no space left for {path} ({what}): {error}; free space on that volume or grow it, "
        "then restart"
    )
    return DiskFull(msg)


def make_dirs_durably(folder: Path) -> None:
    """Creates `folder` and any missing parents, fsyncing the directory that holds each new
    entry, so that a crash cannot lose a directory whose files were already fsynced."""
    missing = []
    while not folder.is_dir():
        missing.append(folder)
        folder = folder.parent
    for new in reversed(missing):
        new.mkdir(exist_ok=True)
        fsync_directory(new.parent)


def fsync_directory(folder: Path) -> None:
    """Makes the entries created or renamed in `folder` survive a crash, not just their data."""
    descriptor = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def write_synced(path: Path, payload: bytes) -> None:
    """Writes `payload` as the whole of `path` (created or truncated) and fsyncs it."""
    with path.open("wb") as out:
        out.write(payload)
        out.flush()
        os.fsync(out.fileno())


def synced_temp(target: Path, payload: bytes) -> Path:
    """`payload` in an fsynced temporary file beside `target`, hidden by a leading dot, under a
    name no other writer uses: concurrent writers of one target never share a temporary file.
    If the write fails, the temporary file is removed."""
    temp = target.with_name(f".{target.name}.{uuid.uuid4().hex}.tmp")
    write_temp(temp, payload)
    return temp


def write_temp(temp: Path, payload: bytes) -> None:
    """`write_synced(temp, payload)`; a failure removes `temp` before it is raised."""
    try:
        write_synced(temp, payload)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise


def replace_durably(target: Path, payload: bytes, temp: Path | None = None) -> None:
    """Makes `payload` the content of `target` in one step a crash cannot tear: an fsynced
    temporary file (`temp`, else one of `synced_temp`) renamed over it, then the directory
    fsynced. A failure leaves `target` as it was, and no temporary file."""
    if temp is None:
        temp = synced_temp(target, payload)
    else:
        write_temp(temp, payload)
    try:
        os.replace(temp, target)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
    fsync_directory(target.parent)
