"""Files that survive a crash: written, fsynced, renamed into place, their directory fsynced.

A leaf module (it imports nothing of ours), so the journal, the checkpoint store and the sinks
share one copy of the idiom.

>>> import tempfile
>>> folder = Path(tempfile.mkdtemp())
>>> replace_durably(folder / "marker", b"done")
>>> (folder / "marker").read_bytes(), [p.name for p in folder.iterdir()]
(b'done', ['marker'])
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path


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
    name no other writer uses: concurrent writers of one target never share a temporary file."""
    temp = target.with_name(f".{target.name}.{uuid.uuid4().hex}.tmp")
    write_synced(temp, payload)
    return temp


def replace_durably(target: Path, payload: bytes, temp: Path | None = None) -> None:
    """Makes `payload` the content of `target` in one step a crash cannot tear: an fsynced
    temporary file (`temp`, else one of `synced_temp`) renamed over it, then the directory
    fsynced. A failure leaves `target` as it was and may leave the temporary file."""
    if temp is None:
        temp = synced_temp(target, payload)
    else:
        write_synced(temp, payload)
    os.replace(temp, target)
    fsync_directory(target.parent)
