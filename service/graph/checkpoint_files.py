"""Byte I/O of the checkpoint store: where its files live, and nothing about what they hold.

`service.graph.checkpoint_store` owns the layout, the manifests and their verification; it reads
and writes through a `CheckpointFiles`, which names everything by a key relative to the store's
root, `/`-separated (`5000/s1-state/part-00000.jsonl`). Two kinds exist: `LocalFiles` here (a
directory every executor mounts) and `S3Files` (`service.graph.checkpoint_s3`, object storage).
Both are small frozen values, because the executors that write the part files get one pickled
with their task; neither holds a credential.

What each must guarantee (docs/architecture.md, State and checkpoints):

1. `writer(key)` publishes the whole object at once, when the block ends without an error, and
   never a torn one: a reader sees the old content or the new, and nothing after a failure;
2. `put(key, data)` does the same for bytes in hand (a manifest, the commit point of a piece);
3. `sync(key)` makes what was published under `key` survive a crash of this host.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Protocol

from service.durable import fsync_directory, replace_durably

READ_BLOCK = 1 << 20
"""Bytes read at a time: part files are read whole, line by line, or hashed."""


class CheckpointFiles(Protocol):
    """Where a checkpoint store's files live; keys are relative to its root."""

    def describe(self, key: str = "") -> str:
        """The file's path or URI, for messages."""
        ...

    def writer(self, key: str) -> contextlib.AbstractContextManager[IO[bytes]]:
        """A file to write `key` into; published whole when the block ends without an error."""
        ...

    def put(self, key: str, data: bytes) -> None:
        """Publishes `data` as `key`, whole and durably."""
        ...

    def chunks(self, key: str) -> Iterator[bytes]:
        """The bytes of `key` in blocks; `FileNotFoundError` when there is no such file."""
        ...

    def size(self, key: str) -> int | None:
        """The size of `key` in bytes, or None when there is no such file."""
        ...

    def children(self, key: str = "") -> list[str]:
        """The names of the folders directly under `key` (the root when empty), sorted."""
        ...

    def delete_tree(self, key: str) -> None:
        """Deletes `key` and everything under it; nothing there is not an error."""
        ...

    def sync(self, key: str) -> None:
        """Makes the files published under folder `key` survive a crash of this host."""
        ...

    def check_reachable(self) -> None:
        """Raises a `DStreamsError` saying what to fix unless the store answers (at start-up)."""
        ...


def lines_of(chunks: Iterable[bytes]) -> Iterator[bytes]:
    """The lines (without their end) of the bytes that `chunks` yields in order."""
    rest = b""
    for chunk in chunks:
        *complete, rest = (rest + chunk).split(b"\n")
        yield from complete
    if rest:
        yield rest


@dataclass(frozen=True)
class LocalFiles:
    """A directory on the local file system (on a cluster, one that every executor mounts)."""

    root: Path

    def path(self, key: str) -> Path:
        return self.root / key if key else self.root

    def describe(self, key: str = "") -> str:
        return str(self.path(key))

    @contextlib.contextmanager
    def writer(self, key: str) -> Iterator[IO[bytes]]:
        """A temporary name beside the target, fsynced and renamed into place at the end; a
        retried task writing the same key uses a temporary name of its own."""
        final = self.path(key)
        final.parent.mkdir(parents=True, exist_ok=True)
        temp = final.with_name(f".{final.name}.{os.getpid()}.tmp")
        try:
            with temp.open("wb") as out:
                yield out
                out.flush()
                os.fsync(out.fileno())
            temp.replace(final)
        finally:
            temp.unlink(missing_ok=True)

    def put(self, key: str, data: bytes) -> None:
        target = self.path(key)
        target.parent.mkdir(parents=True, exist_ok=True)
        replace_durably(target, data)

    def chunks(self, key: str) -> Iterator[bytes]:
        with self.path(key).open("rb") as data:
            yield from iter(lambda: data.read(READ_BLOCK), b"")

    def size(self, key: str) -> int | None:
        try:
            return self.path(key).stat().st_size
        except FileNotFoundError:
            return None

    def children(self, key: str = "") -> list[str]:
        folder = self.path(key)
        if not folder.is_dir():
            return []
        return sorted(p.name for p in folder.iterdir() if p.is_dir())

    def delete_tree(self, key: str) -> None:
        shutil.rmtree(self.path(key), ignore_errors=True)

    def sync(self, key: str) -> None:
        """Fsyncs the folder and the root, whose entries name what was written (the files
        themselves were fsynced before their rename). No folder: nothing was written."""
        folder = self.path(key)
        if folder.exists():
            fsync_directory(folder)
            fsync_directory(self.root)

    def check_reachable(self) -> None:
        """Nothing to check: folders are created as they are written."""
