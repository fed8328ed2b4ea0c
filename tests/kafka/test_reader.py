"""The Kafka source against a real broker: the reader fetches exactly `[from, until)` through
offset gaps (transaction markers, aborted records, compaction), and `ConfluentMetadata` reports
read_committed offsets (ranges end at the last stable offset)."""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from connectors.offsets import OffsetRange
from connectors.planner import ConfluentMetadata, OffsetPlanner, StartingOffsets, split_ranges
from connectors.reader import (
    ReadPolicy,
    ReadStalled,
    SourceRecord,
    UndecodableRecord,
    cached_consumer_count,
    close_consumers,
    read_range,
    read_ranges,
)
from service.errors import DataLoss

MakeTopic = Callable[..., str]
T0 = 1_700_000_000_000
# Generous: a 2-core machine under load. Compaction is driven by the broker's cleaner thread,
# which looks for work every 15 s (log.cleaner.backoff.ms).
COMPACTION_WAIT_S = 90.0


@pytest.fixture(autouse=True)
def _fresh_consumer_cache() -> Iterator[None]:
    yield
    close_consumers()


def conf(bootstrap: str) -> dict[str, Any]:
    return {"bootstrap.servers": bootstrap}


def produce(
    bootstrap: str,
    topic: str,
    values: Sequence[bytes],
    *,
    partition: int = 0,
    keys: Sequence[bytes] | None = None,
    timestamps: Sequence[int] | None = None,
) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for i, value in enumerate(values):
        producer.produce(
            topic,
            value,
            keys[i] if keys else None,
            partition=partition,
            timestamp=timestamps[i] if timestamps else 0,
        )
    assert producer.flush(30) == 0


def transactional(bootstrap: str, name: str) -> Any:
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"tx_{name}"})
    producer.init_transactions(30)
    return producer


def in_transaction(producer: Any, topic: str, values: Sequence[bytes], *, commit: bool) -> None:
    producer.begin_transaction()
    for value in values:
        producer.produce(topic, value, partition=0)
    producer.flush(30)
    if commit:
        producer.commit_transaction(30)
    else:
        producer.abort_transaction(30)


def offsets(records: list[SourceRecord]) -> list[int]:
    return [r.offset for r in records]


def plain_read(bootstrap: str, topic: str, until: int) -> list[tuple[int, bytes | None]]:
    """What an ordinary read_committed consumer sees below `until`: the reference answer."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "plain", **_EOF})
    consumer.assign([TopicPartition(topic, 0, 0)])
    seen: list[tuple[int, bytes | None]] = []
    try:
        while True:
            message = consumer.poll(10)
            assert message is not None, "the reference consumer timed out"
            if message.error() is not None:
                break  # end of partition
            if message.offset() < until:
                seen.append((message.offset(), message.value()))
    finally:
        consumer.close()
    return seen


_EOF = {"enable.partition.eof": True, "isolation.level": "read_committed"}


# --- exact ranges ------------------------------------------------------------------------------


def test_reads_exactly_the_range_and_reuses_its_consumer(
    kafka_bootstrap: str, make_topic: MakeTopic, unique_name: str
) -> None:
    topic = make_topic(kafka_bootstrap, unique_name, partitions=2)
    values = [json.dumps({"n": i}).encode() for i in range(100)]
    produce(kafka_bootstrap, topic, values, keys=[b"k%d" % i for i in range(100)], partition=1)

    middle = list(read_range(conf(kafka_bootstrap), OffsetRange(topic, 1, 10, 30), "json"))
    assert offsets(middle) == list(range(10, 30))
    assert [r.value for r in middle] == [{"n": i} for i in range(10, 30)]
    assert middle[0] == SourceRecord(topic, 1, 10, middle[0].timestamp_ms, b"k10", {"n": 10})
    assert middle[0].timestamp_ms is not None and middle[0].timestamp_ms > T0

    everything = list(read_range(conf(kafka_bootstrap), OffsetRange(topic, 1, 0, 100), "bytes"))
    assert [r.value for r in everything] == values
    assert list(read_range(conf(kafka_bootstrap), OffsetRange(topic, 1, 50, 50), "json")) == []
    assert list(read_range(conf(kafka_bootstrap), OffsetRange(topic, 0, 0, 0), "json")) == []
    assert cached_consumer_count() == 1


def test_undecodable_values_are_kept_with_their_reason_and_logged(
    kafka_bootstrap: str,
    make_topic: MakeTopic,
    unique_name: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    topic = make_topic(kafka_bootstrap, unique_name)
    produce(kafka_bootstrap, topic, [b'{"ok": 1}', b"{broken", b"\xff", b'"fine"'])
    with caplog.at_level(logging.WARNING, logger="connectors.reader"):
        records = list(read_range(conf(kafka_bootstrap), OffsetRange(topic, 0, 0, 4), "json"))
    assert [r.value for r in records] == [{"ok": 1}, None, None, "fine"]
    assert [r.ok for r in records] == [True, False, False, True]
    assert records[1].raw == b"{broken" and records[1].error is not None
    assert "invalid JSON" in records[1].error
    assert (
        records[2].raw == b"\xff" and records[2].error == "not UTF-8: invalid start byte at byte 0"
    )
    assert f"cannot decode {topic}-0 offset 1: invalid JSON" in caplog.text
    assert f"cannot decode {topic}-0 offset 2: not UTF-8" in caplog.text


# --- gaps: transactions, aborted records, compaction -------------------------------------------


def test_transactional_input_skips_aborted_records_and_markers(
    kafka_bootstrap: str, make_topic: MakeTopic, unique_name: str
) -> None:
    topic = make_topic(kafka_bootstrap, unique_name)
    producer = transactional(kafka_bootstrap, unique_name)
    in_transaction(producer, topic, [b"c0", b"c1", b"c2"], commit=True)  # 0-2, marker 3
    in_transaction(producer, topic, [b"a0", b"a1", b"a2"], commit=False)  # 4-6, marker 7
    in_transaction(producer, topic, [b"d0", b"d1"], commit=True)  # 8-9, marker 10

    def read(start: int, end: int) -> list[tuple[int, str]]:
        r = OffsetRange(topic, 0, start, end)
        return [(x.offset, x.value) for x in read_range(conf(kafka_bootstrap), r, "utf-8")]

    assert read(0, 11) == [(0, "c0"), (1, "c1"), (2, "c2"), (8, "d0"), (9, "d1")]
    # Ranges that end on a marker or inside the aborted records still complete.
    assert read(1, 4) == [(1, "c1"), (2, "c2")]
    assert read(2, 6) == [(2, "c2")]
    assert read(3, 8) == []  # only a marker, aborted records and a marker
    assert read(10, 11) == []  # the last record of the log is a commit marker
    assert read(5, 9) == [(8, "d0")]


def test_a_compacted_topic_with_holes_reads_what_survived(
    kafka_bootstrap: str, make_topic: MakeTopic, unique_name: str
) -> None:
    compacting = {
        "cleanup.policy": "compact",
        "segment.ms": "100",
        "min.cleanable.dirty.ratio": "0.001",
        "min.compaction.lag.ms": "0",
        "delete.retention.ms": "100",
    }
    topic = make_topic(kafka_bootstrap, unique_name, config=compacting)
    keys = [b"k%d" % (i % 3) for i in range(30)]
    produce(kafka_bootstrap, topic, [b"v%d" % i for i in range(30)], keys=keys)
    # Once compacted, only the last record of each key is left below offset 30.
    survivors = [(27, b"v27"), (28, b"v28"), (29, b"v29")]
    _wait_for_compaction(kafka_bootstrap, topic, until=30, expected=survivors)

    # Ranges that begin, end or lie entirely in a hole; splits of the whole give the union.
    for pieces in (1, 2, 5, 30):
        ranges = OffsetRange(topic, 0, 0, 30).split(pieces)
        got = [(r.offset, r.value) for r in read_ranges(conf(kafka_bootstrap), ranges, "bytes")]
        assert got == survivors, f"split into {pieces}"
    assert list(read_range(conf(kafka_bootstrap), OffsetRange(topic, 0, 3, 27), "bytes")) == []
    in_hole = read_range(conf(kafka_bootstrap), OffsetRange(topic, 0, 20, 28), "bytes")
    assert [r.offset for r in in_hole] == [27]


def _wait_for_compaction(
    bootstrap: str, topic: str, *, until: int, expected: list[tuple[int, bytes]]
) -> None:
    """Roll segments until a plain consumer sees exactly `expected` below `until`."""
    deadline = time.monotonic() + COMPACTION_WAIT_S
    seen: list[tuple[int, bytes | None]] = []
    while time.monotonic() < deadline:
        time.sleep(1.0)
        # A segment rolls (and becomes cleanable) only when a record arrives after segment.ms.
        # The rollers share one key of their own, so the records below `until` are unaffected.
        produce(bootstrap, topic, [b"roll"], keys=[b"roller"])
        seen = plain_read(bootstrap, topic, until)
        if seen == expected:
            return
    pytest.fail(f"{topic} was not compacted within {COMPACTION_WAIT_S} s; last saw {seen}")


def test_a_range_split_across_tasks_returns_exactly_the_union(
    kafka_bootstrap: str, make_topic: MakeTopic, unique_name: str
) -> None:
    topic = make_topic(kafka_bootstrap, unique_name)
    producer = transactional(kafka_bootstrap, unique_name)
    for batch in range(20):  # 10 records + 1 marker each; every third transaction aborted
        values = [b"%d-%d" % (batch, i) for i in range(10)]
        in_transaction(producer, topic, values, commit=batch % 3 != 1)
    produce(kafka_bootstrap, topic, [b"plain%d" % i for i in range(25)])
    whole = OffsetRange(topic, 0, 0, 20 * 11 + 25)
    expected = list(read_range(conf(kafka_bootstrap), whole, "bytes"))
    assert len(expected) == 13 * 10 + 25  # batches 1, 4, ..., 19 were aborted

    for min_partitions in (2, 7, 64):
        tasks = split_ranges([whole], min_partitions)
        assert len(tasks) == min_partitions
        per_task = [list(read_range(conf(kafka_bootstrap), t, "bytes")) for t in tasks]
        assert [rec for task in per_task for rec in task] == expected
        for task, records in zip(tasks, per_task, strict=True):
            assert all(task.from_offset <= r.offset < task.until_offset for r in records)


# --- failures ----------------------------------------------------------------------------------


def test_offsets_deleted_after_planning_raise_data_loss(
    kafka_bootstrap: str, make_topic: MakeTopic, unique_name: str
) -> None:
    topic = make_topic(kafka_bootstrap, unique_name)
    produce(kafka_bootstrap, topic, [b"x"] * 20)
    with ConfluentMetadata(conf(kafka_bootstrap)) as metadata:
        planner = OffsetPlanner(
            metadata, topics=[topic], starting=StartingOffsets.earliest(), max_rate_per_partition=5
        )
        (planned,) = planner.plan(T0, 1000)
        assert (planned.from_offset, planned.until_offset) == (0, 5)
        _delete_records_before(kafka_bootstrap, topic, 12)

        with pytest.raises(DataLoss, match=rf"{topic}-0 from 0 \(range \[0, 5\)\)"):
            list(read_range(conf(kafka_bootstrap), planned, "bytes"))
        assert cached_consumer_count() == 0  # a failed read does not leave its consumer behind
        with pytest.raises(DataLoss, match=rf"\[5, 12\) of {topic}-0"):
            planner.plan(T0 + 1000, 1000)


def test_a_replayed_range_skips_deleted_offsets_when_data_loss_is_allowed(
    kafka_bootstrap: str, make_topic: MakeTopic, unique_name: str
) -> None:
    topic = make_topic(kafka_bootstrap, unique_name)
    produce(kafka_bootstrap, topic, [b"v%d" % i for i in range(20)])
    _delete_records_before(kafka_bootstrap, topic, 12)
    skipped: list[OffsetRange] = []
    policy = ReadPolicy(fail_on_data_loss=False, on_lost=skipped.append)

    records = list(
        read_range(conf(kafka_bootstrap), OffsetRange(topic, 0, 5, 15), "bytes", policy=policy)
    )

    assert [(r.offset, r.value) for r in records] == [(i, b"v%d" % i) for i in (12, 13, 14)]
    assert skipped == [OffsetRange(topic, 0, 5, 12)]
    # A range that lies wholly below the first stored offset reads nothing and is lost whole.
    skipped.clear()
    assert (
        list(read_range(conf(kafka_bootstrap), OffsetRange(topic, 0, 0, 4), "bytes", policy=policy))
        == []
    )
    assert skipped == [OffsetRange(topic, 0, 0, 4)]


def test_an_undecodable_record_fails_the_read_when_nothing_may_take_it(
    kafka_bootstrap: str, make_topic: MakeTopic, unique_name: str
) -> None:
    topic = make_topic(kafka_bootstrap, unique_name)
    produce(kafka_bootstrap, topic, [b'{"n": 0}', b'{"n": 1}', b"{broken", b'{"n": 3}'])
    policy = ReadPolicy(fail_on_decode_error=True)

    with pytest.raises(UndecodableRecord, match=rf"{topic}-0 offset 2: invalid JSON"):
        list(read_range(conf(kafka_bootstrap), OffsetRange(topic, 0, 0, 4), "json", policy=policy))
    assert cached_consumer_count() == 0
    # Records before it are read as usual, and the default policy hands the failure on.
    good = OffsetRange(topic, 0, 0, 2)
    assert [r.value for r in read_range(conf(kafka_bootstrap), good, "json", policy=policy)] == [
        {"n": 0},
        {"n": 1},
    ]
    whole = list(read_range(conf(kafka_bootstrap), OffsetRange(topic, 0, 0, 4), "json"))
    assert [r.offset for r in whole if not r.ok] == [2]


def _delete_records_before(bootstrap: str, topic: str, offset: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.delete_records([TopicPartition(topic, 0, offset)], request_timeout=30)
    for future in futures.values():
        future.result(timeout=30)


def test_a_range_beyond_the_end_stalls_with_a_clear_error(
    kafka_bootstrap: str, make_topic: MakeTopic, unique_name: str
) -> None:
    topic = make_topic(kafka_bootstrap, unique_name)
    produce(kafka_bootstrap, topic, [b"x"] * 3)
    r = OffsetRange(topic, 0, 1, 10)
    got: list[SourceRecord] = []
    with pytest.raises(ReadStalled, match=rf"{topic}-0 offsets \[1, 10\) .* at offset 3"):
        for record in read_range(conf(kafka_bootstrap), r, "bytes", stall_timeout_s=1.5):
            got.append(record)
    assert offsets(got) == [1, 2]


# --- ConfluentMetadata -------------------------------------------------------------------------


def test_metadata_reports_the_last_stable_offset_before_an_open_transaction(
    kafka_bootstrap: str, make_topic: MakeTopic, unique_name: str
) -> None:
    topic = make_topic(kafka_bootstrap, unique_name)
    producer = transactional(kafka_bootstrap, unique_name)
    in_transaction(producer, topic, [b"c0", b"c1"], commit=True)  # 0-1, marker 2
    producer.begin_transaction()
    producer.produce(topic, b"open", partition=0)  # offset 3, not committed yet
    producer.flush(30)
    tp = (topic, 0)
    with ConfluentMetadata(conf(kafka_bootstrap)) as metadata:
        assert metadata.watermarks([tp]) == {tp: (0, 3)}
        planner = OffsetPlanner(metadata, topics=[topic], starting=StartingOffsets.earliest())
        assert planner.plan(T0, 1000) == [OffsetRange(topic, 0, 0, 3)]
        producer.commit_transaction(30)  # offset 4 is the marker
        assert planner.plan(T0 + 1000, 1000) == [OffsetRange(topic, 0, 3, 5)]
    records = read_range(conf(kafka_bootstrap), OffsetRange(topic, 0, 0, 5), "utf-8")
    assert [r.value for r in records] == ["c0", "c1", "open"]


def test_metadata_partitions_timestamps_and_committed_offsets(
    kafka_bootstrap: str, make_topic: MakeTopic, unique_name: str
) -> None:
    topic = make_topic(kafka_bootstrap, unique_name, partitions=2)
    other = make_topic(kafka_bootstrap, f"{unique_name}_other")
    produce(kafka_bootstrap, topic, [b"x"] * 5, timestamps=[T0 + 1000 * i for i in range(5)])
    group = f"{unique_name}_g"
    _commit(kafka_bootstrap, group, topic, 0, 4)

    with ConfluentMetadata({**conf(kafka_bootstrap), "group.id": group}) as metadata:
        assert sorted(metadata.partitions_of([topic, "no_such_topic"])) == [(topic, 0), (topic, 1)]
        matching = metadata.partitions_matching(re.compile(re.escape(unique_name) + ".*"))
        assert sorted(matching) == [(topic, 0), (topic, 1), (other, 0)]
        assert metadata.partitions_matching(re.compile(re.escape(unique_name))) != matching
        at = metadata.offsets_for_timestamp([(topic, 0), (topic, 1)], T0 + 2500)
        assert at == {(topic, 0): 3, (topic, 1): None}
        committed = metadata.committed_offsets([(topic, 0), (topic, 1)])
        assert committed == {(topic, 0): 4, (topic, 1): None}
        # Every partition's watermarks from one pair of requests, across topics.
        marks = metadata.watermarks([(topic, 0), (topic, 1), (other, 0)])
        assert set(marks) == {(topic, 0), (topic, 1), (other, 0)}
        assert [low for low, _ in marks.values()] == [0, 0, 0]
        assert sum(high for _, high in marks.values()) == 5


def _commit(bootstrap: str, group: str, topic: str, partition: int, offset: int) -> None:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        consumer.commit(offsets=[TopicPartition(topic, partition, offset)], asynchronous=False)
    finally:
        consumer.close()


def test_a_read_reports_its_earliest_and_latest_record_timestamps(
    kafka_bootstrap: str, make_topic: MakeTopic, unique_name: str
) -> None:
    topic = make_topic(kafka_bootstrap, unique_name)
    stamps = [1_700_000_000_000 + 10 * i for i in range(30)]
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    for i, stamp in enumerate(stamps):
        producer.produce(topic, b"v%d" % i, partition=0, timestamp=stamp)
    assert producer.flush(30) == 0
    seen: list[tuple[OffsetRange, int, int]] = []
    policy = ReadPolicy(on_timestamps=lambda r, first, last: seen.append((r, first, last)))
    wanted = OffsetRange(topic, 0, 5, 25)

    records = list(
        read_range(conf(kafka_bootstrap), wanted, "bytes", values_only=True, policy=policy)
    )

    assert len(records) == 20
    # Records before the range may be fetched with it, but only the range's own bound the
    # latest; the earliest is at most the range's first record's timestamp.
    ((r, first, last),) = seen
    assert r == wanted
    assert first <= stamps[5] and stamps[24] <= last <= stamps[-1]
