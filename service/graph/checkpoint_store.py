"""The checkpoint store: state RDDs written as data (JSON), one file per partition.

Layout under the store's root (`checkpoint.path`, a path every executor sees)::

    <root>/<batch_time>/<piece>/part-00000.jsonl ... _manifest.json

A *piece* is one RDD a stateful stream needs to carry on (its state, a window's remembered
per-batch results, the previous window). Each task writes its partition to a temporary name,
fsyncs and renames it, and reports a SHA-256 of the bytes; the driver then writes the piece's
manifest the same way. Only when every manifest is durable does the driver journal
`checkpoint(t, refs)` (see `service.driver.checkpoints`). A part file is UTF-8 JSON lines: in
format version 2 (written now) each line is an array of up to `CHUNK_RECORDS` records, in
version 1 (still read) a single record; the manifest says which, and a newer version is
refused. Nothing here pickles: keys and values are JSON with tags for the Python types JSON
lacks, so a new build (or a changed job function) reads old checkpoints. State may hold None,
bool, int, float, str, bytes, and lists, tuples, dicts, sets and frozensets of those; any other
type is refused when the checkpoint is written.

The functions that run on executors are plain top-level functions with no Spark import.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from service.durable import fsync_directory, naming_a_full_disk, replace_durably
from service.errors import DStreamsError
from service.graph.key_placement import key_placement

MANIFEST = "_manifest.json"
FORMAT_VERSION = 2
"""Version of the part-file layout written now; 1 (a record per line) is still read."""
READABLE_VERSIONS = (1, 2)
CHUNK_RECORDS = 4096
FORMATS = ("state", "pairs", "rows")
_SIMPLE = (str, int, float, bool, type(None))
_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)


class CheckpointError(DStreamsError):
    """A checkpoint cannot be written, is missing, or does not match its manifest."""


# --- values --------------------------------------------------------------------------------------


def encode_value(value: Any) -> Any:
    """`value` as JSON data; tuples, dicts, sets and bytes become one-key tagged objects."""
    kind = type(value)
    if kind in _SIMPLE:
        return value
    if kind is list:
        return [encode_value(item) for item in value]
    if kind is tuple:
        return {"t": [encode_value(item) for item in value]}
    if kind is dict:
        return {"d": [[encode_value(k), encode_value(v)] for k, v in value.items()]}
    if kind in (set, frozenset):
        items = sorted((encode_value(item) for item in value), key=repr)
        return {"s" if kind is set else "f": items}
    if kind is bytes:
        return {"b": base64.b64encode(value).decode()}
    msg = (
        f"state holds a {kind.__module__}.{kind.__qualname__}, which a checkpoint cannot store "
        "as data; expected None, bool, int, float, str, bytes or lists, tuples, dicts and sets "
        "of those. Convert the state to such values (e.g. a dataclass to a tuple or dict)."
    )
    raise CheckpointError(msg)


def decode_value(data: Any) -> Any:
    """Inverse of `encode_value`."""
    if type(data) in _SIMPLE:
        return data
    if type(data) is list:
        return [decode_value(item) for item in data]
    ((tag, body),) = data.items()
    if tag == "t":
        return tuple(decode_value(item) for item in body)
    if tag == "d":
        return {decode_value(k): decode_value(v) for k, v in body}
    if tag == "s":
        return {decode_value(item) for item in body}
    if tag == "f":
        return frozenset(decode_value(item) for item in body)
    if tag == "b":
        return base64.b64decode(body)
    msg = f"checkpoint value has unknown tag {tag!r}; it was written by a newer dstreams"
    raise CheckpointError(msg)


def _convert_pair(convert: Callable[[Any], Any], key: Any, value: Any) -> tuple[Any, Any]:
    """`convert` (`encode_value` or `decode_value`) applied to a key and a value, except to the
    simple JSON types (the common case), which stand for themselves in JSON data."""
    if type(key) not in _SIMPLE:
        key = convert(key)
    if type(value) not in _SIMPLE:
        value = convert(value)
    return key, value


def encode_record(fmt: str, row: Any) -> Any:
    """One record as JSON data: `[key, value, touched]` (state), `[key, value]`, or a row.
    Keys and values of the simple JSON types (the common case) skip `encode_value`."""
    if fmt == "state":
        key, (_kind, value, touched) = row
        return [*_convert_pair(encode_value, key, value), touched]
    if fmt == "pairs":
        return list(_convert_pair(encode_value, *row))
    return encode_value(row)


def decode_record(fmt: str, data: Any, keep: int) -> Any:
    """Inverse of `encode_record`; `keep` is the state kind a restored record takes."""
    if fmt == "state":
        key, value, touched = data
        key, value = _convert_pair(decode_value, key, value)
        return (key, (keep, value, int(touched)))
    if fmt == "pairs":
        return _convert_pair(decode_value, *data)
    return decode_value(data)


def encode_row(fmt: str, row: Any) -> str:
    """One record as a JSON line (the version 1 layout: one record per line)."""
    return _ENCODER.encode(encode_record(fmt, row))


def decode_row(fmt: str, line: str) -> Any:
    """Inverse of `encode_row`."""
    from service.graph.state_functions import KEEP

    return decode_record(fmt, json.loads(line), KEEP)


def encode_chunk(fmt: str, rows: list[Any]) -> bytes:
    """Up to `CHUNK_RECORDS` records as one JSON array on one line (the version 2 layout): one
    encoder call per chunk instead of per record is what makes large state cheap to write."""
    return (_ENCODER.encode([encode_record(fmt, row) for row in rows]) + "\n").encode()


def decode_chunk(fmt: str, line: str | bytes) -> list[Any]:
    """Inverse of `encode_chunk`."""
    from service.graph.state_functions import KEEP

    data = json.loads(line)
    if type(data) is not list:
        msg = f"checkpoint chunk holds a {type(data).__name__}; expected a JSON array of records"
        raise CheckpointError(msg)
    if fmt == "state":
        return _decode_state_chunk(data, KEEP)
    return [decode_record(fmt, item, KEEP) for item in data]


def _decode_state_chunk(data: list[Any], keep: int) -> list[Any]:
    """`decode_record` of a chunk of state records, inlined: this loop runs once per key when
    a large state is restored."""
    rows = []
    for key, value, touched in data:
        if type(key) not in _SIMPLE:
            key = decode_value(key)  # noqa: PLW2901 - the decoded key replaces its encoding
        if type(value) not in _SIMPLE:
            value = decode_value(value)  # noqa: PLW2901 - likewise
        rows.append((key, (keep, value, int(touched))))
    return rows


# --- executor side -------------------------------------------------------------------------------


def part_name(index: int) -> str:
    return f"part-{index:05d}.jsonl"


def write_partition(
    directory: str, fmt: str, index: int, rows: Iterable[Any]
) -> Iterator[tuple[int, int, int, str]]:
    """Writes one partition (format version 2: chunks of records, one per line) to a temporary
    name, fsyncs, renames; `(index, records, bytes, sha256)`. A retried or speculative task
    writes the same bytes to the same final name."""
    folder = Path(directory)
    folder.mkdir(parents=True, exist_ok=True)
    final = folder / part_name(index)
    temp = folder / f".{final.name}.{uuid.uuid4().hex}.tmp"
    try:
        with naming_a_full_disk(final, f"checkpoint store: state partition {index}"):
            records, size, digest = _write_chunks(temp, fmt, rows)
            temp.replace(final)
    except BaseException:
        temp.unlink(missing_ok=True)  # a retried task must not leave one behind per attempt
        raise
    yield (index, records, size, digest)


def _write_chunks(temp: Path, fmt: str, rows: Iterable[Any]) -> tuple[int, int, str]:
    """Writes and fsyncs `rows` in chunks to `temp`; `(records, bytes, sha256)`."""
    digest = hashlib.sha256()
    records = size = 0
    with temp.open("wb") as out:
        for chunk in _chunks(rows):
            line = encode_chunk(fmt, chunk)
            out.write(line)
            digest.update(line)
            records += len(chunk)
            size += len(line)
        out.flush()
        os.fsync(out.fileno())
    return records, size, digest.hexdigest()


def _chunks(rows: Iterable[Any]) -> Iterator[list[Any]]:
    chunk: list[Any] = []
    for row in rows:
        chunk.append(row)
        if len(chunk) == CHUNK_RECORDS:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def read_partition(
    directory: str, fmt: str, pairs: Iterable[Any], version: int = FORMAT_VERSION
) -> Iterator[Any]:
    """Reads the part files named by the partition numbers in `pairs` (one per task), in the
    layout of format `version` (1: a record per line; 2: a chunk of records per line)."""
    for index, _ in pairs:
        with (Path(directory) / part_name(index)).open("rb") as lines:
            for line in lines:
                if version == 1:
                    yield decode_row(fmt, line.decode("utf-8"))
                else:
                    yield from decode_chunk(fmt, line)


# --- manifests and the store ---------------------------------------------------------------------


@dataclass(frozen=True)
class PieceManifest:
    """What a piece's directory must hold: one part per partition, with its size and hash."""

    fmt: str
    partitions: int
    records: tuple[int, ...]
    sizes: tuple[int, ...]
    sha256: tuple[str, ...]
    version: int = FORMAT_VERSION
    """Layout of the part files (see `read_partition`)."""
    key_placement: str | None = None
    """What placed the keys of a keyed piece in its partitions (`service.graph.key_placement`);
    None for rows, and in manifests written before dstreams recorded it."""

    @property
    def total_records(self) -> int:
        return sum(self.records)

    @property
    def total_bytes(self) -> int:
        return sum(self.sizes)

    def to_json(self) -> dict[str, Any]:
        return {
            "v": self.version,
            "format": self.fmt,
            "partitions": self.partitions,
            "records": list(self.records),
            "sizes": list(self.sizes),
            "sha256": list(self.sha256),
            **({"key_placement": self.key_placement} if self.key_placement else {}),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> PieceManifest:
        version = int(data.get("v", 1))
        if version not in READABLE_VERSIONS:
            msg = (
                f"checkpoint manifest has format version {version}; this dstreams reads "
                f"versions {', '.join(map(str, READABLE_VERSIONS))}. It was written by a newer "
                "dstreams: run that version, or start the job under a new app id and journal."
            )
            raise CheckpointError(msg)
        return cls(
            str(data["format"]),
            int(data["partitions"]),
            tuple(int(n) for n in data["records"]),
            tuple(int(n) for n in data["sizes"]),
            tuple(str(h) for h in data["sha256"]),
            version,
            data.get("key_placement"),
        )

    @classmethod
    def from_reports(cls, fmt: str, reports: list[tuple[int, int, int, str]]) -> PieceManifest:
        ordered = sorted(reports)
        if [r[0] for r in ordered] != list(range(len(ordered))):
            msg = f"checkpoint piece reports partitions {[r[0] for r in ordered]}; expected 0..n-1"
            raise CheckpointError(msg)
        return cls(
            fmt,
            len(ordered),
            tuple(r[1] for r in ordered),
            tuple(r[2] for r in ordered),
            tuple(r[3] for r in ordered),
            key_placement=None if fmt == "rows" else key_placement(),
        )


class CheckpointStore:
    """Checkpoint directories under one root; see the module docstring for the layout."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)

    def piece_ref(self, batch_time: int, piece: str) -> str:
        """The reference journaled for a piece: its directory relative to the root."""
        return f"{batch_time}/{piece}"

    def path(self, ref: str) -> Path:
        return self.root / ref

    def write_pieces(self, sc: Any, pieces: list[tuple[Any, str, str]]) -> dict[str, PieceManifest]:
        """Writes `(rdd, ref, fmt)` pieces in one Spark job (task by task, temp name, fsync,
        rename), then each piece's durable manifest; returns the manifests by ref."""
        if not pieces:
            return {}
        jobs = []
        for number, (rdd, ref, fmt) in enumerate(pieces):
            directory = self.path(ref)
            if directory.exists():
                shutil.rmtree(directory)  # left by an attempt that crashed before journaling
            directory.mkdir(parents=True)
            write = partial(write_partition, str(directory), fmt)
            jobs.append(rdd.mapPartitionsWithIndex(write).map(partial(_numbered, number)))
        try:
            return self._write_manifests(pieces, (jobs[0] if len(jobs) == 1 else sc.union(jobs)))
        except BaseException:
            # Never journaled: what was written of it only takes space another attempt needs.
            for _rdd, ref, _fmt in pieces:
                shutil.rmtree(self.path(ref), ignore_errors=True)
            raise

    def _write_manifests(
        self, pieces: list[tuple[Any, str, str]], job: Any
    ) -> dict[str, PieceManifest]:
        """Runs the pieces' write `job`, then writes each piece's manifest durably."""
        reports: dict[int, list[tuple[int, int, int, str]]] = {n: [] for n in range(len(pieces))}
        for number, report in job.collect():
            reports[number].append(report)
        manifests = {}
        for number, (_rdd, ref, fmt) in enumerate(pieces):
            manifest = PieceManifest.from_reports(fmt, reports[number])
            path = self.path(ref) / MANIFEST
            with naming_a_full_disk(path, "checkpoint store: a piece's manifest"):
                replace_durably(path, json.dumps(manifest.to_json()).encode())
            manifests[ref] = manifest
        return manifests

    def sync(self, batch_time: int) -> None:
        """Makes the checkpoint directory's entries durable (after every piece is written). A
        checkpoint without pieces (windows with nothing to remember) has no directory."""
        folder = self.root / str(batch_time)
        if folder.exists():
            fsync_directory(folder)
            fsync_directory(self.root)

    def manifest(self, ref: str) -> PieceManifest:
        path = self.path(ref) / MANIFEST
        try:
            return PieceManifest.from_json(json.loads(path.read_text()))
        except FileNotFoundError:
            msg = f"checkpoint piece {ref!r} has no manifest at {path}; it is missing"
            raise CheckpointError(msg) from None
        except (ValueError, KeyError, TypeError) as error:
            msg = f"checkpoint manifest {path} is unreadable: {error!r}"
            raise CheckpointError(msg) from error

    def verify(self, ref: str, read_data: bool = True) -> PieceManifest:
        """Checks a piece against its manifest (every part there, sizes and, with `read_data`,
        SHA-256); raises `CheckpointError` saying what is wrong."""
        manifest = self.manifest(ref)
        placed = manifest.key_placement
        if placed is not None and placed != key_placement():
            msg = (
                f"checkpoint piece {ref!r}: its keys were placed in partitions by {placed!r}, "
                f"this driver places them by {key_placement()!r} (a new Python or "
                "PYTHONHASHSEED), so they would be looked for in the wrong partitions; run the "
                "previous one, or start the job under a new app id and journal"
            )
            raise CheckpointError(msg)
        for index in range(manifest.partitions):
            part = self.path(ref) / part_name(index)
            if not part.exists():
                msg = f"checkpoint piece {ref!r}: {part.name} is missing"
                raise CheckpointError(msg)
            if part.stat().st_size != manifest.sizes[index]:
                msg = (
                    f"checkpoint piece {ref!r}: {part.name} holds {part.stat().st_size} bytes, "
                    f"its manifest says {manifest.sizes[index]}"
                )
                raise CheckpointError(msg)
            if read_data and _sha256(part) != manifest.sha256[index]:
                msg = f"checkpoint piece {ref!r}: {part.name} does not match its SHA-256"
                raise CheckpointError(msg)
        return manifest

    def load(self, sc: Any, ref: str, manifest: PieceManifest) -> Any:
        """The piece as an RDD with one partition per part file, partition `p` reading file `p`.

        Keyed pieces were written from RDDs hash-partitioned into `partitions`, so partition `p`
        holds exactly the keys that hash to `p`: `partitionBy` over the partition numbers
        (small ints hash to themselves) gives Spark that partitioner without moving any state,
        and later unions with the same partitioning need no shuffle.
        """
        count = manifest.partitions
        numbers = sc.parallelize([(p, None) for p in range(count)], count)
        read = partial(read_partition, str(self.path(ref)), manifest.fmt, version=manifest.version)
        if manifest.fmt == "rows":
            # Unkeyed rows (a plain window's batches) carry no partitioner, like the originals.
            return numbers.mapPartitions(read)
        return numbers.partitionBy(count).mapPartitions(read, preservesPartitioning=True)

    def batch_times(self) -> list[int]:
        """Batch times with a checkpoint directory, oldest first."""
        if not self.root.exists():
            return []
        return sorted(int(p.name) for p in self.root.iterdir() if p.name.isdigit())

    def delete(self, batch_time: int) -> None:
        shutil.rmtree(self.root / str(batch_time), ignore_errors=True)


def _numbered(number: int, report: Any) -> tuple[int, Any]:
    return (number, report)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as data:
        for block in iter(lambda: data.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
