"""`event_time="kafka"`: a Kafka record's own timestamp is the event time, with no user code,
and a late record keeps its topic, partition and offset on its way to the dead letters."""

from __future__ import annotations

from typing import Any

from connectors.reader import SourceRecord
from service.testing import run_batches


def click(offset: int, timestamp_ms: int) -> tuple[str, SourceRecord]:
    record = SourceRecord("clicks", 0, offset, timestamp_ms, None, {"page": "/home"})
    return ("/home", record)


def test_kafka_timestamps_drive_the_windows(sc: Any) -> None:
    batches = [
        [click(0, 10_500), click(1, 11_200)],
        [click(2, 25_000)],  # the watermark reaches 20,000: [10,000, 20,000) is emitted
        [click(3, 10_900)],  # too late (no allowed lateness)
    ]

    def build(stream: Any) -> Any:
        counts = stream.count_by_key_and_event_window(
            event_time="kafka", length_ms=10_000, slack_ms=5_000, late="dead_letter"
        )
        late = counts.late_records().map(lambda r: ("late", r.value.offset, r.event_ms))
        return counts.map(tuple).union(late)

    found = run_batches(sc, batches, build)
    assert found == [[], [("/home", 10_000, 20_000, 2, 0)], [("late", 3, 10_900)]]
