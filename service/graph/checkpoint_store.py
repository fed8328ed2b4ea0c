"""The checkpoint store: state RDDs written as data (JSON), one file per partition.

Layout under the store's root (`checkpoint.path`: a path every executor sees, or a prefix in
object storage; only the byte I/O differs, `service.graph.checkpoint_files`)::

    <root>/<batch_time>/<piece>/part-00000.jsonl ... _manifest.json

A *piece* is one RDD a stateful stream needs to carry on (its state, a window's remembered
per-batch results, the previous window). Each task publishes its partition's part file whole
(a temporary name, fsync and rename; or one upload) and reports a SHA-256 of the bytes; the
driver then publishes the piece's manifest, the piece's commit point: parts without it are not
a checkpoint. Only when every manifest is durable does the driver journal `checkpoint(t, refs)`
(see `service.driver.checkpoints`). A part file is UTF-8 JSON lines: in
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
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from service.durable import naming_a_full_disk
from service.errors import DStreamsError
from service.graph.checkpoint_files import CheckpointFiles, LocalFiles, lines_of
from service.graph.key_placement import key_placement
from service.graph.partition_input import GuardedInput

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


def part_key(folder: str, index: int) -> str:
    """The key of partition `index`'s part file in the piece `folder` (a ref)."""
    return f"{folder}/{part_name(index)}" if folder else part_name(index)


def write_partition(
    files: CheckpointFiles, folder: str, fmt: str, index: int, rows: Iterable[Any]
) -> Iterator[tuple[int, int, int, str]]:
    """Writes one partition (format version 2: chunks of records, one per line) as the part
    file `index` of the piece `folder`, published whole (`CheckpointFiles.writer`: temporary
    name, fsync, rename, the temporary file removed if it fails; or one upload);
    `(index, records, bytes, sha256)`. A retried or speculative task writes the same bytes to the
    same name. A full local volume is one `DiskFull` naming the part."""
    digest = hashlib.sha256()
    records = size = 0
    key = part_key(folder, index)
    where = Path(files.describe(key))
    with (
        naming_a_full_disk(where, f"checkpoint store: state partition {index}"),
        files.writer(key) as out,
    ):
        for chunk in _chunks(rows):
            line = encode_chunk(fmt, chunk)
            out.write(line)
            digest.update(line)
            records += len(chunk)
            size += len(line)
    yield (index, records, size, digest.hexdigest())


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
    files: CheckpointFiles,
    folder: str,
    fmt: str,
    pairs: Iterable[Any],
    version: int = FORMAT_VERSION,
) -> Iterator[Any]:
    """Reads the part files of the piece `folder` named by the partition numbers in `pairs`
    (one per task), in the layout of format `version` (1: a record per line; 2: a chunk of
    records per line)."""
    for index, _ in pairs:
        for line in lines_of(files.chunks(part_key(folder, index))):
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

    @property
    def total_bytes(self) -> int:
        return sum(self.sizes)

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
    """Checkpoints under one root, in the layout of the module docstring, whatever holds the
    bytes (`CheckpointFiles`: a local directory, or object storage)."""

    def __init__(self, files: CheckpointFiles | str | Path) -> None:
        if isinstance(files, str | Path):
            files = _local_files(files)
        self.files: CheckpointFiles = files

    @property
    def location(self) -> str:
        """The root's path or URI, for messages."""
        return self.files.describe()

    def piece_ref(self, batch_time: int, piece: str) -> str:
        """The reference journaled for a piece: its folder relative to the root."""
        return f"{batch_time}/{piece}"

    def write_pieces(self, sc: Any, pieces: list[tuple[Any, str, str]]) -> dict[str, PieceManifest]:
        """Writes `(rdd, ref, fmt)` pieces in one Spark job (each task publishes its part file
        whole), then each piece's manifest, durably; returns the manifests by ref. Parts first,
        manifest last: a piece without its manifest is not a checkpoint (`verify` refuses it)."""
        if not pieces:
            return {}
        jobs = []
        for number, (rdd, ref, fmt) in enumerate(pieces):
            self.files.delete_tree(ref)  # left by an attempt that crashed before journaling
            write = GuardedInput(partial(write_partition, self.files, ref, fmt))
            jobs.append(rdd.mapPartitionsWithIndex(write).map(partial(_numbered, number)))
        try:
            return self._write_manifests(pieces, (jobs[0] if len(jobs) == 1 else sc.union(jobs)))
        except Exception:
            # Never journaled: what was written of it only takes space another attempt needs.
            # (A driver that dies leaves it; the next attempt and retention delete it.)
            for _rdd, ref, _fmt in pieces:
                self.files.delete_tree(ref)
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
            manifests[ref] = self.write_manifest(
                ref, PieceManifest.from_reports(fmt, reports[number])
            )
        return manifests

    def write_manifest(self, ref: str, manifest: PieceManifest) -> PieceManifest:
        """Publishes the piece's manifest: the commit point of the piece."""
        key = f"{ref}/{MANIFEST}"
        with naming_a_full_disk(Path(self.files.describe(key)), "checkpoint store: a manifest"):
            self.files.put(key, json.dumps(manifest.to_json()).encode())
        return manifest

    def sync(self, batch_time: int) -> None:
        """Makes the checkpoint's files durable (after every piece is written). A checkpoint
        without pieces (windows with nothing to remember) has no folder."""
        self.files.sync(str(batch_time))

    def manifest(self, ref: str) -> PieceManifest:
        where = self.files.describe(f"{ref}/{MANIFEST}")
        try:
            text = b"".join(self.files.chunks(f"{ref}/{MANIFEST}"))
            return PieceManifest.from_json(json.loads(text))
        except FileNotFoundError:
            msg = f"checkpoint piece {ref!r} has no manifest at {where}; it is missing"
            raise CheckpointError(msg) from None
        except (ValueError, KeyError, TypeError) as error:
            msg = f"checkpoint manifest {where} is unreadable: {error!r}"
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
            key, name = part_key(ref, index), part_name(index)
            size = self.files.size(key)
            if size is None:
                msg = f"checkpoint piece {ref!r}: {name} is missing"
                raise CheckpointError(msg)
            if size != manifest.sizes[index]:
                msg = (
                    f"checkpoint piece {ref!r}: {name} holds {size} bytes, "
                    f"its manifest says {manifest.sizes[index]}"
                )
                raise CheckpointError(msg)
            if read_data and _sha256(self.files.chunks(key)) != manifest.sha256[index]:
                msg = f"checkpoint piece {ref!r}: {name} does not match its SHA-256"
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
        read = partial(read_partition, self.files, ref, manifest.fmt, version=manifest.version)
        if manifest.fmt == "rows":
            # Unkeyed rows (a plain window's batches) carry no partitioner, like the originals.
            return numbers.mapPartitions(read)
        return numbers.partitionBy(count).mapPartitions(read, preservesPartitioning=True)

    def batch_times(self) -> list[int]:
        """Batch times with a checkpoint folder, oldest first."""
        return sorted(int(name) for name in self.files.children() if name.isdigit())

    def pieces(self, batch_time: int) -> dict[str, str]:
        """The pieces found in a checkpoint's folder, journaled or not: name -> ref."""
        return {
            name: self.piece_ref(batch_time, name) for name in self.files.children(str(batch_time))
        }

    def delete(self, batch_time: int) -> None:
        self.files.delete_tree(str(batch_time))


def _local_files(root: str | Path) -> LocalFiles:
    """A local root; a URI here would silently become a local path (`s3a://b` -> `s3a:/b`)."""
    if "://" in str(root) and not str(root).startswith("file://"):
        msg = (
            f"checkpoint store {str(root)!r} is a URI; build the store from the checkpoint "
            "settings (CheckpointSettings.store()), which know its kind"
        )
        raise CheckpointError(msg)
    return LocalFiles(Path(str(root).removeprefix("file://")))


def _numbered(number: int, report: Any) -> tuple[int, Any]:
    return (number, report)


def _sha256(chunks: Iterable[bytes]) -> str:
    digest = hashlib.sha256()
    for block in chunks:
        digest.update(block)
    return digest.hexdigest()
