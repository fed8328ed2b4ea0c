"""The durable half of a keyed state kept on disk (`service.graph.disk_state`): each batch's
changes per partition, and now and then a whole snapshot of a partition, in the checkpoint
store (docs/architecture.md, "State on disk").

Layout under the checkpoint store's root (the folder names are not batch times, so the store's
own checkpoint listing and deletion never see them)::

    disk-state/<stream>/<origin>-of-<partitions>/p00003/<batch_time>/changes
                                                                    /snapshot  (some batches)

A *lineage* is one history of the state: it starts empty at batch `origin` and is cut into a
fixed number of partitions. `changes` is published whole (`CheckpointFiles.writer`) before the
task that made it commits its local store: a header line (JSON: the batch, the batch whose
state it was applied to, the number of rows), then one line per key whose state the batch
changed: the key's JSON text, a tab, the state's JSON text (empty: the key was removed), a tab,
and the batch time of the key's last value. JSON text holds no raw tab or newline, so the
lines split without quoting. The `previous` of each header chains a partition's batches back to
the origin, so no listing is needed to replay them. `snapshot` is a copy of the partition's
SQLite store as of that batch (`service.graph.disk_store`).
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from service.errors import DStreamsError
from service.graph.checkpoint_files import CheckpointFiles, lines_of

ROOT = "disk-state"
CHANGES = "changes"
SNAPSHOT = "snapshot"


class DiskStateError(DStreamsError):
    """A state on disk cannot carry on: a batch's changes are missing from the durable store,
    or a file there is not one dstreams wrote."""


@dataclass(frozen=True)
class Change:
    """One key's new state after a batch, as the JSON texts the store keeps."""

    key: str
    state: str | None
    """None: the key was removed."""
    touched: int
    """The batch time of the key's last value (what a TTL counts from)."""


@dataclass(frozen=True)
class Changes:
    """What one batch changed in one partition."""

    batch_time: int
    previous: int | None
    """The batch whose state this batch was applied to; None at the lineage's origin."""
    rows: tuple[Change, ...]


@dataclass(frozen=True)
class Lineage:
    """Where one history of one state stream lives in the checkpoint store. A small frozen
    value: tasks get it pickled."""

    files: CheckpointFiles
    stream: str
    origin: int
    partitions: int

    @property
    def base(self) -> str:
        return f"{ROOT}/{self.stream}/{self.origin}-of-{self.partitions}"

    def partition_folder(self, partition: int) -> str:
        return f"{self.base}/p{partition:05d}"

    def batch_folder(self, partition: int, batch_time: int) -> str:
        return f"{self.partition_folder(partition)}/{batch_time}"

    # --- changes ---------------------------------------------------------------------------

    def write_changes(self, partition: int, changes: Changes) -> None:
        """Publishes a batch's changes whole and durably (a retried task writes the same)."""
        folder = self.batch_folder(partition, changes.batch_time)
        header = {
            "batch": changes.batch_time,
            "previous": changes.previous,
            "rows": len(changes.rows),
        }
        with self.files.writer(f"{folder}/{CHANGES}") as out:
            out.write((json.dumps(header) + "\n").encode())
            lines = [f"{c.key}\t{c.state or ''}\t{c.touched}\n" for c in changes.rows]
            out.write("".join(lines).encode())
        self.files.sync(folder)
        self.files.sync(self.partition_folder(partition))

    def read_changes(self, partition: int, batch_time: int) -> Changes | None:
        """The changes batch `batch_time` made in `partition`; None when none were published."""
        key = f"{self.batch_folder(partition, batch_time)}/{CHANGES}"
        if self.files.size(key) is None:
            return None
        lines = lines_of(self.files.chunks(key))
        header = json.loads(next(lines))
        rows = tuple(_change(line.decode()) for line in lines)
        if header.get("batch") != batch_time or header.get("rows") != len(rows):
            msg = (
                f"{self.files.describe(key)} is not a whole changes file of batch {batch_time} "
                f"(header {header}, {len(rows)} rows); restore the checkpoint folder from a copy"
            )
            raise DiskStateError(msg)
        return Changes(batch_time, header["previous"], rows)

    def previous_of(self, partition: int, batch_time: int) -> int | None:
        """The batch before `batch_time` in `partition`'s chain, from its changes' header."""
        key = f"{self.batch_folder(partition, batch_time)}/{CHANGES}"
        try:
            first = next(lines_of(self.files.chunks(key)))
        except FileNotFoundError:
            raise self.missing(partition, batch_time) from None
        previous = json.loads(first)["previous"]
        return None if previous is None else int(previous)

    def missing(self, partition: int, batch_time: int) -> DiskStateError:
        msg = (
            f"the changes of batch {batch_time} are missing from "
            f"{self.files.describe(self.batch_folder(partition, batch_time))}, so partition "
            f"{partition} of state {self.stream} cannot be rebuilt; restore the checkpoint "
            "folder from a copy, or start the job under a new app id and journal"
        )
        return DiskStateError(msg)

    # --- snapshots -------------------------------------------------------------------------

    def has_snapshot(self, partition: int, batch_time: int) -> bool:
        key = f"{self.batch_folder(partition, batch_time)}/{SNAPSHOT}"
        return self.files.size(key) is not None

    def upload_snapshot(self, partition: int, batch_time: int, source: Path) -> None:
        folder = self.batch_folder(partition, batch_time)
        with self.files.writer(f"{folder}/{SNAPSHOT}") as out, source.open("rb") as data:
            shutil.copyfileobj(data, out, 1 << 20)
        self.files.sync(folder)

    def download_snapshot(self, partition: int, batch_time: int, target: Path) -> None:
        key = f"{self.batch_folder(partition, batch_time)}/{SNAPSHOT}"
        with target.open("wb") as out:
            for chunk in self.files.chunks(key):
                out.write(chunk)

    # --- retention -------------------------------------------------------------------------

    def batches(self, partition: int) -> list[int]:
        """The batches with a folder in `partition`, oldest first."""
        names = self.files.children(self.partition_folder(partition))
        return sorted(int(name) for name in names if name.isdigit())

    def prune(self, keep_from: int) -> int:
        """Deletes, per partition, every batch folder older than its newest snapshot at or
        before `keep_from` (a state as of `keep_from` or later is rebuilt from that snapshot
        and the changes after it); returns how many folders went."""
        deleted = 0
        for partition in range(self.partitions):
            batches = self.batches(partition)
            snapshots = [t for t in batches if t <= keep_from and self.has_snapshot(partition, t)]
            if not snapshots:
                continue
            for old in (t for t in batches if t < snapshots[-1]):
                self.files.delete_tree(self.batch_folder(partition, old))
                deleted += 1
        return deleted

    def other_lineages(self) -> Iterator[str]:
        """The folders of this stream's other lineages (an earlier start, another count)."""
        mine = f"{self.origin}-of-{self.partitions}"
        for name in self.files.children(f"{ROOT}/{self.stream}"):
            if name != mine:
                yield f"{ROOT}/{self.stream}/{name}"


def _change(line: str) -> Change:
    key, state, touched = line.split("\t")
    return Change(key, state or None, int(touched))
