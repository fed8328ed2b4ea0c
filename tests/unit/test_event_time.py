"""Event-time windows without Spark: the merge of one partition, option checks, Kafka
timestamps, late records as dead letters, metrics and the status board's watermarks."""

from __future__ import annotations

import operator
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from connectors.reader import SourceRecord
from service.driver.late_records import late_dead_letter
from service.errors import ConfigError
from service.graph import event_functions as ef
from service.graph.event_window import EventTimeFigures, event_window_spec
from service.observe.catalogue import MetricSet
from service.observe.event_time_metrics import EventTimeMetrics
from service.observe.status import StatusBoard


def spec(**options: Any) -> ef.EventWindowSpec:
    values = {"length_ms": 1000, "slide_ms": None, "slack_ms": 0, "allowed_lateness_ms": 0}
    values |= options
    late = values.pop("late", "dead_letter")
    return event_window_spec(operator.itemgetter(0), operator.add, ef.identity, late=late, **values)


def merge(s: ef.EventWindowSpec, rows: list[Any], batch: int = 1) -> list[Any]:
    return list(ef.merge_event_partition(s, batch, None, 0, rows))


def test_a_window_is_emitted_once_the_watermark_reaches_its_end_and_then_freed() -> None:
    s = spec()
    tagged = list(ef.tag_event_records(s.event_time, 1, 0, [("a", (100, 1)), ("a", (1000, 2))]))
    out = merge(s, tagged)
    results = [entry[2] for _key, entry in out if entry[0] == ef.OUT]
    assert results == [ef.WindowResult("a", 0, 1000, (100, 1), 0)]
    kept = [entry for _key, entry in out if entry[0] in (ef.WIN, ef.WM)]
    assert kept == [(ef.WIN, 1000, (1000, 2), -1), (ef.WM, 1000)]


def test_a_record_within_the_lateness_corrects_and_a_later_one_is_late() -> None:
    s = spec(allowed_lateness_ms=500)
    state = [("a", (ef.WIN, 0, (100, 1), 0)), (0, (ef.WM, 1200))]
    news = [("a", (ef.NEW, 200, 0, 0, (200, 5))), (0, (ef.MARK, 1600))]
    out = merge(s, state + news, batch=7)
    results = [entry[2] for _key, entry in out if entry[0] == ef.OUT]
    assert results == [ef.WindowResult("a", 0, 1000, (100, 1, 200, 5), 1)]
    assert (0, (ef.WM, 1600)) in out
    assert not [e for _k, e in out if e[0] == ef.WIN], "closed at 1000 + 500 <= 1600: freed"
    late = merge(s, [(0, (ef.WM, 1600)), ("a", (ef.NEW, 300, 0, 0, (300, 1)))], batch=8)
    (record,) = [entry[2] for _key, entry in late if entry[0] == ef.LATE]
    assert (record.key, record.event_ms, record.watermark_ms) == ("a", 300, 1600)
    assert "too late" in record.reason


def test_options_are_checked() -> None:
    with pytest.raises(ConfigError, match="late to be one of drop, dead_letter"):
        spec(late="keep")
    with pytest.raises(ConfigError, match="positive"):
        spec(length_ms=0)
    with pytest.raises(ConfigError, match="event_time"):
        event_window_spec("wall", operator.add, None, 1000, None, 0, 0, "drop")


def test_kafka_timestamps_are_an_event_time_choice() -> None:
    s = event_window_spec("kafka", operator.add, None, 1000, None, 0, 0, "drop")
    record = SourceRecord("clicks", 0, 5, 1_700_000_000_123, b"k", {"page": "/"})
    assert s.event_time(record) == 1_700_000_000_123
    with pytest.raises(ValueError, match="no timestamp"):
        s.event_time(record._replace(timestamp_ms=None))


def test_a_late_kafka_record_keeps_where_it_came_from_as_a_dead_letter() -> None:
    record = SourceRecord("clicks", 2, 41, 1000, b"k", {"page": "/"})
    letter = late_dead_letter(ef.LateRecord("/", record, 1000, 90_000, "too late"))
    assert (letter.source_topic, letter.source_partition, letter.source_offset) == ("clicks", 2, 41)
    assert (letter.error_type, letter.key, letter.value) == ("LateRecord", b"k", b'{"page":"/"}')
    plain = late_dead_letter(ef.LateRecord("a", (5, 1), 5, 9000, "too late"))
    assert (plain.source_offset, plain.key, plain.value) == (-1, b'"a"', b"[5,1]")


def test_metrics_count_what_grew_and_show_the_watermark() -> None:
    registry = CollectorRegistry()
    metrics = EventTimeMetrics(MetricSet(registry, "driver"))
    metrics.record("s3", "drop", EventTimeFigures(5000, 2000, 4, 3, 1, 2), 5000)
    metrics.record("s3", "drop", EventTimeFigures(5000, 2000, 4, 3, 1, 2), 5000)  # seen: no-op
    metrics.record("s3", "drop", EventTimeFigures(6000, 2500, 1, 5, 1, 7), 6000)

    def value(name: str, **labels: str) -> float | None:
        return registry.get_sample_value(name, {"stream": "s3", **labels})

    assert value("dstreams_event_watermark_timestamp_seconds") == 2.5
    assert value("dstreams_event_watermark_lag_seconds") == 3.5
    assert value("dstreams_event_open_windows") == 1
    assert value("dstreams_event_windows_emitted_total") == 5
    assert value("dstreams_event_corrections_total") == 1
    assert value("dstreams_event_late_records_total", action="drop") == 7


def test_the_status_board_shows_watermarks() -> None:
    board = StatusBoard("app", 1000)
    board.set_watermarks(9000, {"s3-event_window": (6000, 12)})
    assert board.snapshot()["watermarks"] == {
        "s3-event_window": {"watermark_ms": 6000, "lag_ms": 3000, "open_windows": 12}
    }
