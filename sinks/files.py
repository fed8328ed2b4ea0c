"""Files sink: `<root>/<output>/t=<batch_time>/part-<p>.jsonl`, one JSON value per line, or
`part-<p>.avro`, an Avro object container file, when the sink has an Avro schema.

Each part is written to a temporary name, fsynced, and published under its final name with a
hard link, which fails if the name exists: a part file that exists is complete, and of concurrent
copies of one task exactly one publishes (the others report a skip). Its presence is the marker
that makes `write` idempotent. Rows are sorted (by their canonical JSON), so a replayed batch
writes identical bytes whatever order its rows arrived in; an Avro part also has a sync marker
fixed by its schema, where Avro writers usually pick a random one. A batch is visible once its
`_SUCCESS` file exists. A new batch folder is made durable in its parent (its entry fsynced)
before its parts are published. A write that fails leaves no temporary file, and a full volume
is one `DiskFull` naming the part (docs/architecture.md, "Faults").
"""

from __future__ import annotations

import errno
import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from connectors.avro import AvroEncoder, sync_marker
from service import faults
from service.durable import (
    fsync_directory,
    make_dirs_durably,
    naming_a_full_disk,
    replace_durably,
    synced_temp,
)
from service.errors import SinkError
from sinks.base import BatchKey, WithoutKafka, WriteResult

SUCCESS = "_SUCCESS"


def encode_row(row: Any) -> str:
    """One row as a canonical JSON line (tuples become arrays, keys sorted).

    >>> encode_row(("word", {"z": 1, "y": 2}))
    '["word",{"y":2,"z":1}]'
    """
    return json.dumps(row, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


class FileSink(WithoutKafka):
    """Writes each batch of an output as a folder of JSON-lines part files."""

    writes_on_driver = False
    writes_in_parallel = False

    def __init__(self, root: str | Path, avro_schema: str | None = None) -> None:
        self.root = str(root)
        self.avro = AvroEncoder(avro_schema) if avro_schema is not None else None
        self.suffix = "avro" if avro_schema is not None else "jsonl"

    def batch_dir(self, output: str, batch_time: int) -> Path:
        return Path(self.root) / output / f"t={batch_time}"

    def part_path(self, key: BatchKey) -> Path:
        name = f"part-{key.partition:05d}.{self.suffix}"
        return self.batch_dir(key.output, key.batch_time) / name

    def setup(self, app: str, output: str) -> None:
        (Path(self.root) / output).mkdir(parents=True, exist_ok=True)

    def write(self, key: BatchKey, rows: Iterable[Any]) -> WriteResult:
        target = self.part_path(key)
        if target.exists():
            return WriteResult(rows=0, skipped=True)
        lines = sorted(encode_row(row) for row in rows)
        if self.avro is not None:
            payload = _avro_container(self.avro, [json.loads(line) for line in lines], key)
        else:
            payload = "".join(line + "\n" for line in lines).encode()
        what = f"files sink: part {key.partition} of batch {key.batch_time} of {key.output}"
        with naming_a_full_disk(target, what):
            published = _publish_new(target, payload)
        if not published:
            return WriteResult(rows=0, skipped=True)  # a concurrent copy of the task was first
        return WriteResult(rows=len(lines))

    def commit(self, app: str, output: str, batch_time: int, partitions: int) -> None:
        folder = self.batch_dir(output, batch_time)
        if (folder / SUCCESS).exists():
            return
        suffix = self.suffix
        missing = [p for p in range(partitions) if not (folder / f"part-{p:05d}.{suffix}").exists()]
        if missing:
            msg = (
                f"files sink cannot commit {output} batch {batch_time}: parts {missing} of "
                f"{partitions} are missing in {folder}; the batch must be replayed"
            )
            raise SinkError(msg)
        marker = json.dumps({"app": app, "batch_time": batch_time, "partitions": partitions})
        target = folder / SUCCESS
        with naming_a_full_disk(target, f"files sink: commit of batch {batch_time} of {output}"):
            make_dirs_durably(folder)  # an empty batch has no part, so maybe no folder yet
            replace_durably(target, marker.encode())  # the same bytes every time

    def close(self) -> None:
        """Nothing to release: every file is closed by the call that wrote it."""

    def committed_batches(self, output: str) -> list[int]:
        """Batch times whose `_SUCCESS` exists, in order."""
        folder = Path(self.root) / output
        times = [int(d.name[2:]) for d in folder.glob("t=*") if (d / SUCCESS).exists()]
        return sorted(times)

    def read_batch(self, output: str, batch_time: int) -> list[Any]:
        """Every row of a committed batch, decoded (for audits and tests)."""
        rows: list[Any] = []
        for part in sorted(self.batch_dir(output, batch_time).glob(f"part-*.{self.suffix}")):
            if self.avro is not None:
                import fastavro

                with part.open("rb") as stream:
                    rows.extend(fastavro.reader(stream))
            else:
                rows.extend(json.loads(line) for line in part.read_text().splitlines())
        return rows


def _avro_container(encoder: AvroEncoder, rows: list[Any], key: BatchKey) -> bytes:
    """One container file of `rows` (already in their replay order), uncompressed."""
    import io

    import fastavro

    buffer = io.BytesIO()
    try:
        records = [encoder.as_datum(row) for row in rows]
        schema = json.loads(encoder.schema)
        marker = sync_marker(encoder.schema)
        fastavro.writer(buffer, schema, records, codec="null", sync_marker=marker, strict=True)
    except (TypeError, ValueError, KeyError, AttributeError) as exc:
        msg = f"{key}: rows do not match the files sink's Avro schema: {exc}"
        raise SinkError(msg) from exc
    return buffer.getvalue()


# Hard links are refused by some file systems (e.g. SMB shares, FAT); there a part is renamed
# into place, which may replace a concurrent copy's identical bytes.
_NO_HARD_LINKS = frozenset({errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EXDEV})


def _publish_new(target: Path, payload: bytes) -> bool:
    """Make `payload` the file `target` unless `target` exists; False if it already did."""
    temp = _durable_temp(target, payload)
    faults.crash_point("sink-mid-write")
    try:
        os.link(temp, target)  # unlike exists-then-rename, one step: only one copy can win
    except FileExistsError:
        return False
    except OSError as exc:
        if exc.errno not in _NO_HARD_LINKS:
            raise
        os.replace(temp, target)
    finally:
        temp.unlink(missing_ok=True)
    fsync_directory(target.parent)
    return True


def _durable_temp(target: Path, payload: bytes) -> Path:
    """`payload` in an fsynced temporary file next to `target` (hidden by its leading dot)."""
    make_dirs_durably(target.parent)
    return synced_temp(target, payload)
