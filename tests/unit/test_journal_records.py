"""Journal records: JSON round trips, version and type checks, malformed input."""

from __future__ import annotations

import json
from typing import Any

import pytest

from connectors.offsets import OffsetRange
from service.errors import JournalCorrupt, JournalError
from service.journal.records import (
    AnyRecord,
    CheckpointRecord,
    CompletedRecord,
    EpochRecord,
    PlannedRecord,
    SnapshotRecord,
    UnknownRecordVersion,
    decode_bytes,
    decode_record,
    encode_bytes,
)

RANGES = (OffsetRange("words", 0, 0, 10), OffsetRange("words", 1, 5, 7))

EXAMPLES: list[AnyRecord] = [
    EpochRecord(3, 1_700_000_000_000, "host:42"),
    PlannedRecord(3, 1_000, RANGES, "fp1"),
    PlannedRecord(3, 2_000, (), "fp1", {"files": {"next": "a.csv"}}),
    CompletedRecord(3, 1_000, {"counts": 12, "dlq": 0}),
    CompletedRecord(3, 2_000, {"counts": 3, "dlq": 0}, partitions={"counts": 4, "dlq": 0}),
    CheckpointRecord(3, 1_000, {"state-0": "file:///ckpt/1000"}),
    SnapshotRecord(4, (EpochRecord(3, 1, "a"), PlannedRecord(3, 1_000, RANGES, "fp1"))),
]


@pytest.mark.parametrize("record", EXAMPLES, ids=lambda r: type(r).__name__)
def test_round_trip_through_json_text(record: AnyRecord) -> None:
    text = json.dumps(record.to_json())
    assert decode_record(json.loads(text)) == record
    assert decode_bytes(encode_bytes(record)) == record


@pytest.mark.parametrize("record", EXAMPLES, ids=lambda r: type(r).__name__)
def test_encoding_starts_with_version_then_type(record: AnyRecord) -> None:
    body = encode_bytes(record)
    assert body.startswith(b'{"v":1,"type":"' + record.TYPE.encode() + b'"')


def test_planned_ranges_passed_as_list_compare_equal_to_tuple() -> None:
    as_list = PlannedRecord(1, 5, list(RANGES), "fp")  # type: ignore[arg-type]  # caller error
    assert as_list == PlannedRecord(1, 5, RANGES, "fp")


def test_unknown_version_is_a_clear_error() -> None:
    data = EpochRecord(1, 0, "x").to_json() | {"v": 2}
    with pytest.raises(UnknownRecordVersion, match="version 2.*reads only version 1"):
        decode_record(data)


def test_missing_version_is_refused() -> None:
    data = EpochRecord(1, 0, "x").to_json()
    del data["v"]
    with pytest.raises(UnknownRecordVersion):
        decode_record(data)


def test_unknown_type_names_the_known_ones() -> None:
    with pytest.raises(JournalCorrupt, match="unknown type 'bogus'.*'planned'"):
        decode_record({"v": 1, "type": "bogus", "epoch": 1})


@pytest.mark.parametrize(
    "data",
    [
        {"v": 1, "type": "epoch", "epoch": "1", "started_at_ms": 0, "owner": "x"},
        {"v": 1, "type": "epoch", "epoch": True, "started_at_ms": 0, "owner": "x"},
        {"v": 1, "type": "epoch", "started_at_ms": 0, "owner": "x"},
        {
            "v": 1,
            "type": "planned",
            "epoch": 1,
            "batch_time": 1,
            "ranges": {},
            "graph_fingerprint": "",
        },
        {
            "v": 1,
            "type": "planned",
            "epoch": 1,
            "batch_time": 1,
            "ranges": [{"topic": "t", "partition": 0, "from": 5, "until": 2}],
            "graph_fingerprint": "",
        },
        {"v": 1, "type": "completed", "epoch": 1, "batch_time": 1, "outputs": []},
    ],
)
def test_malformed_records_are_corrupt(data: dict[str, Any]) -> None:
    with pytest.raises(JournalCorrupt, match="malformed"):
        decode_record(data)


def test_non_object_and_bad_json_are_corrupt() -> None:
    with pytest.raises(JournalCorrupt, match="JSON object"):
        decode_record([1, 2])  # type: ignore[arg-type]  # what a damaged file could hold
    with pytest.raises(JournalCorrupt, match="not valid UTF-8 JSON"):
        decode_bytes(b'{"v":1,')


def test_nested_snapshot_is_refused() -> None:
    inner = SnapshotRecord(1, ()).to_json()
    with pytest.raises(JournalCorrupt):
        decode_record({"v": 1, "type": "snapshot", "epoch": 2, "records": [inner]})


def test_errors_share_the_journal_root() -> None:
    assert issubclass(UnknownRecordVersion, JournalError)


def test_a_completed_record_of_an_older_build_reads_with_no_partitions() -> None:
    """Records written before `partitions` existed still read; the audit says what it lacks."""
    old = {"v": 1, "type": "completed", "epoch": 3, "batch_time": 1_000, "outputs": {"c": 2}}
    record = decode_record(old)
    assert record == CompletedRecord(3, 1_000, {"c": 2})
    assert isinstance(record, CompletedRecord) and record.partitions == {}
    assert "partitions" not in record.to_json()  # and is written as an older build wrote it


def test_a_completed_record_names_each_outputs_partitions() -> None:
    record = CompletedRecord(3, 1_000, {"c": 2}, partitions={"c": 4})
    assert record.to_json()["partitions"] == {"c": 4}
    assert decode_bytes(encode_bytes(record)) == record
