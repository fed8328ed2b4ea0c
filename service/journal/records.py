"""The journal's record types: versioned JSON values, the only thing a journal stores.

Every record is one JSON object whose first two keys are ``"v"`` (the format version) and
``"type"``. Records hold data only, never pickled code, so a new build of the service can
recover a journal written by an older one. A version this build does not know is refused
with `UnknownRecordVersion` rather than guessed at.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeAlias

from connectors.json_fields import fields_to_json
from connectors.offsets import OffsetRange
from service.errors import JournalCorrupt, JournalError

FORMAT_VERSION = 1


class UnknownRecordVersion(JournalError):
    """A record was written by a build that uses a journal format this build does not know."""


@dataclass(frozen=True)
class EpochRecord:
    """A driver took ownership of the journal; every later record of an older epoch is fenced."""

    TYPE: ClassVar[str] = "epoch"

    epoch: int
    started_at_ms: int
    owner: str

    def to_json(self) -> dict[str, Any]:
        return _flat_json(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> EpochRecord:
        return cls(_int(data, "epoch"), _int(data, "started_at_ms"), _str(data, "owner"))


@dataclass(frozen=True)
class PlannedRecord:
    """Batch `batch_time` is defined by these ranges; journaled before any of its work runs.

    `extra` carries the positions of sources that are not Kafka (JSON values only).
    """

    TYPE: ClassVar[str] = "planned"

    epoch: int
    batch_time: int
    ranges: tuple[OffsetRange, ...]
    graph_fingerprint: str
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # A list passed by a caller would make two equal plans compare unequal.
        object.__setattr__(self, "ranges", tuple(self.ranges))

    def to_json(self) -> dict[str, Any]:
        return {
            **_header(self.TYPE, self.epoch),
            "batch_time": self.batch_time,
            "ranges": [r.to_json() for r in self.ranges],
            "graph_fingerprint": self.graph_fingerprint,
            "extra": self.extra,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> PlannedRecord:
        ranges = tuple(OffsetRange.from_json(r) for r in _list(data, "ranges"))
        extra = data.get("extra", {})
        if not isinstance(extra, dict):
            raise _malformed(data, "extra", "an object")
        return cls(
            _int(data, "epoch"),
            _int(data, "batch_time"),
            ranges,
            _str(data, "graph_fingerprint"),
            extra,
        )


@dataclass(frozen=True)
class CompletedRecord:
    """Every output of batch `batch_time` is committed; `outputs` counts rows per output.

    `skipped` lists the offsets the batch could not read because retention deleted them first
    (only a source with fail_on_data_loss off goes on without them); the key is left out when
    there are none, so older builds read these records as they always did.

    `partitions` names each output's number of tasks, hence of sink markers, for the audit
    (`dstreams audit`); records written before it existed read as `{}` ("not recorded").
    """

    TYPE: ClassVar[str] = "completed"

    epoch: int
    batch_time: int
    outputs: dict[str, int] = field(default_factory=dict)
    skipped: tuple[OffsetRange, ...] = ()
    partitions: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "skipped", tuple(sorted(self.skipped)))

    def to_json(self) -> dict[str, Any]:
        data = {
            **_header(self.TYPE, self.epoch),
            "batch_time": self.batch_time,
            "outputs": self.outputs,
        }
        if self.skipped:
            data["skipped"] = [r.to_json() for r in self.skipped]
        if self.partitions:
            data["partitions"] = self.partitions
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> CompletedRecord:
        outputs = {str(k): int(v) for k, v in _dict(data, "outputs").items()}
        skipped = tuple(OffsetRange.from_json(r) for r in data.get("skipped", []))
        partitions = {str(k): int(v) for k, v in _dict(data, "partitions").items()}
        return cls(_int(data, "epoch"), _int(data, "batch_time"), outputs, skipped, partitions)


@dataclass(frozen=True)
class CheckpointRecord:
    """The state as of batch `batch_time` is stored at `refs` (one reference per state stream)."""

    TYPE: ClassVar[str] = "checkpoint"

    epoch: int
    batch_time: int
    refs: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return _flat_json(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> CheckpointRecord:
        refs = {str(k): str(v) for k, v in _dict(data, "refs").items()}
        return cls(_int(data, "epoch"), _int(data, "batch_time"), refs)


JournalRecord: TypeAlias = EpochRecord | PlannedRecord | CompletedRecord | CheckpointRecord


@dataclass(frozen=True)
class SnapshotRecord:
    """The compacted journal up to this point, so a reader can start here instead of at the start.

    Its `records` replace everything before it; they keep their own epochs and order.
    """

    TYPE: ClassVar[str] = "snapshot"

    epoch: int
    records: tuple[JournalRecord, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            **_header(self.TYPE, self.epoch),
            "records": [r.to_json() for r in self.records],
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> SnapshotRecord:
        records: list[JournalRecord] = []
        for item in _list(data, "records"):
            inner = decode_record(item)
            if isinstance(inner, SnapshotRecord):
                raise _malformed(data, "records", "plain records, not a nested snapshot")
            records.append(inner)
        return cls(_int(data, "epoch"), tuple(records))


AnyRecord: TypeAlias = JournalRecord | SnapshotRecord

_TYPES: dict[str, type[AnyRecord]] = {
    cls.TYPE: cls
    for cls in (EpochRecord, PlannedRecord, CompletedRecord, CheckpointRecord, SnapshotRecord)
}


def decode_record(data: dict[str, Any]) -> AnyRecord:
    """Build the record a JSON object describes, checking its version and type first."""
    if not isinstance(data, dict):
        msg = f"a journal record must be a JSON object, found {type(data).__name__}"
        raise JournalCorrupt(msg)
    version = data.get("v")
    if version != FORMAT_VERSION:
        msg = (
            f"journal record has format version {version!r}; this build of dstreams reads only "
            f"version {FORMAT_VERSION}. Run the dstreams version that wrote the journal, "
            "or upgrade this one."
        )
        raise UnknownRecordVersion(msg)
    kind = data.get("type")
    cls = _TYPES.get(kind) if isinstance(kind, str) else None
    if cls is None:
        msg = (
            f"journal record has unknown type {kind!r}; expected one of {sorted(_TYPES)}. "
            "The journal was written by another program or a newer dstreams."
        )
        raise JournalCorrupt(msg)
    try:
        return cls.from_json(data)
    except (KeyError, TypeError, ValueError) as exc:
        msg = f"journal record of type {kind!r} is malformed: {exc!r}; record: {data!r}"
        raise JournalCorrupt(msg) from exc


def encode_bytes(record: AnyRecord) -> bytes:
    """The record as compact UTF-8 JSON, keys in a fixed order so equal records give equal bytes."""
    return json.dumps(record.to_json(), separators=(",", ":"), ensure_ascii=False).encode()


def decode_bytes(body: bytes) -> AnyRecord:
    """Parse bytes written by `encode_bytes`."""
    try:
        data = json.loads(body.decode())
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        msg = f"journal record is not valid UTF-8 JSON: {exc}"
        raise JournalCorrupt(msg) from exc
    return decode_record(data)


def _header(kind: str, epoch: int) -> dict[str, Any]:
    # "v" comes first: readers (and the file backend's resync scan) rely on that prefix.
    return {"v": FORMAT_VERSION, "type": kind, "epoch": epoch}


def _flat_json(record: EpochRecord | CheckpointRecord) -> dict[str, Any]:
    # A record whose fields are all plain JSON values: the header, then each field by its name
    # ("epoch" keeps its place in the header).
    return {**_header(record.TYPE, record.epoch), **fields_to_json(record)}


def _int(data: dict[str, Any], key: str) -> int:
    value = data[key]
    if isinstance(value, bool) or not isinstance(value, int):
        raise _malformed(data, key, "an integer")
    return int(value)


def _str(data: dict[str, Any], key: str) -> str:
    value = data[key]
    if not isinstance(value, str):
        raise _malformed(data, key, "a string")
    return value


def _list(data: dict[str, Any], key: str) -> list[Any]:
    value = data[key]
    if not isinstance(value, list):
        raise _malformed(data, key, "a list")
    return value


def _dict(data: dict[str, Any], key: str) -> dict[str, Any]:
    value = data.get(key, {})
    if not isinstance(value, dict):
        raise _malformed(data, key, "an object")
    return value


def _malformed(data: dict[str, Any], key: str, expected: str) -> ValueError:
    found = type(data.get(key)).__name__
    return ValueError(f"field {key!r} should be {expected}, found {found}")
