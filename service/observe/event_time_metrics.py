"""Prometheus metrics of event-time windows (registered beside `Metrics`, fed by the observer).

Per event-window stream (label `stream`, bounded by the graph): the watermark as a timestamp and
its lag behind the latest batch time, the windows held open, and counters of windows emitted,
corrections (emissions with revision > 0) and late records (label `action`: `drop` or
`dead_letter`). Figures come from the tasks that merged each batch (an accumulator read by the
driver), so they cost no Spark job; a batch recomputed during recovery counts again.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from service.graph.dstream import StatefulDStream
from service.graph.event_window import EventTimeFigures, EventWindow
from service.observe.catalogue import MetricSet


def event_time_figures(streams: Iterable[StatefulDStream]) -> dict[str, tuple[str, Any]]:
    """`{stream label: (late action, figures)}` of the event windows among `streams` that have
    run a batch in this process."""
    found: dict[str, tuple[str, Any]] = {}
    for stream in streams:
        window = stream.computation
        if isinstance(window, EventWindow) and window.latest_figures is not None:
            found[stream.piece_prefix.rstrip("-")] = (window.spec.late, window.latest_figures)
    return found


class EventTimeMetrics:
    def __init__(self, metrics: MetricSet) -> None:
        self._m = metrics
        self._seen: dict[str, EventTimeFigures] = {}

    def record(self, stream: str, late_action: str, figures: EventTimeFigures, now_ms: int) -> None:
        """Sets the gauges and adds to the counters what grew since the figures last seen."""
        before = self._seen.get(stream)
        if before is not None and before.batch_time >= figures.batch_time:
            return
        self._seen[stream] = figures
        if figures.watermark_ms is not None:
            self._m.gauge("dstreams_event_watermark_timestamp_seconds").labels(stream).set(
                figures.watermark_ms / 1000
            )
            self._m.gauge("dstreams_event_watermark_lag_seconds").labels(stream).set(
                max(0, now_ms - figures.watermark_ms) / 1000
            )
        self._m.gauge("dstreams_event_open_windows").labels(stream).set(figures.open_windows)
        totals = (figures.emitted, figures.corrections, figures.late)
        previous = (before.emitted, before.corrections, before.late) if before else (0, 0, 0)
        grown = [now - then for now, then in zip(totals, previous, strict=True)]
        self._m.counter("dstreams_event_windows_emitted_total").labels(stream).inc(max(0, grown[0]))
        self._m.counter("dstreams_event_corrections_total").labels(stream).inc(max(0, grown[1]))
        self._m.counter("dstreams_event_late_records_total").labels(stream, late_action).inc(
            max(0, grown[2])
        )
