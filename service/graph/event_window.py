"""Event-time windows: windows by when things happened, closed by a watermark read from the data.

The watermark is the newest event time seen so far minus the slack; it is computed from the
records of each batch (never the wall clock) and kept, with the open windows, as keyed state
(see `service.graph.event_functions` for its records). There is one watermark per stream: each
input partition sends its newest event time to every state partition in the batch's one
shuffle, so every state partition computes the same watermark inside the output's job, and a
replay from a checkpoint reproduces it exactly (docs/architecture.md, "Event time").

A window `[start, end)` is emitted once the watermark reaches `end` (revision 0); a record of an
emitted window that arrives within the allowed lateness re-emits it with the next revision; a
record too late for every window it belongs to is dropped (counted) or becomes a dead letter.
A window's state is freed once the watermark passes its end plus the allowed lateness.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

from service.errors import ConfigError
from service.graph import event_functions as ef
from service.graph.base import RDD, BatchStream, GraphContext
from service.graph.plan import BatchPlan
from service.graph.stateful import (
    Piece,
    StatefulComputation,
    persist,
    release,
    release_superseded,
    union_partitioned,
)

EventTime = Callable[[Any], int] | str


@dataclass(frozen=True)
class EventTimeFigures:
    """What the driver knows of an event-time stream after its latest batch (for metrics):
    the watermark and open windows then, and emissions, corrections and late records counted
    since this process started."""

    batch_time: int
    watermark_ms: int | None
    open_windows: int
    emitted: int
    corrections: int
    late: int


def resolve_event_time(event_time: EventTime) -> Callable[[Any], int]:
    """A user's `event_time(value) -> ms`, or `"kafka"`: the value is a Kafka `SourceRecord`
    (e.g. from `KafkaInputDStream.records()`) and its own timestamp is the event time."""
    if event_time == "kafka":
        return ef.kafka_timestamp
    if callable(event_time):
        return event_time
    msg = f"event_time must be a function value -> ms or 'kafka', got {event_time!r}"
    raise ConfigError(msg)


def check_event_options(
    length_ms: int,
    slide_ms: int,
    slack_ms: int,
    lateness_ms: int,
    late: str,
    max_skew_ms: int = ef.DEFAULT_MAX_SKEW_MS,
) -> None:
    problem = ""
    if length_ms <= 0 or slide_ms <= 0:
        problem = f"length_ms and slide_ms to be positive, got {length_ms} and {slide_ms}"
    elif slack_ms < 0 or lateness_ms < 0:
        problem = (
            f"slack_ms and allowed_lateness_ms to be 0 or more, got {slack_ms} and {lateness_ms}"
        )
    elif max_skew_ms <= 0:
        problem = f"max_skew_ms to be positive, got {max_skew_ms}"
    elif late not in ef.LATE_CHOICES:
        problem = f"late to be one of {', '.join(ef.LATE_CHOICES)}, got {late!r}"
    if problem:
        msg = f"event window: expected {problem}"
        raise ConfigError(msg)


def event_window_spec(
    event_time: EventTime,
    reduce: Callable[[Any, Any], Any],
    lift: Callable[[Any], Any] | None,
    length_ms: int,
    slide_ms: int | None,
    slack_ms: int,
    allowed_lateness_ms: int,
    late: str,
    max_skew_ms: int = ef.DEFAULT_MAX_SKEW_MS,
) -> ef.EventWindowSpec:
    """The checked spec of an event window; `slide_ms` None makes it tumbling."""
    slide = length_ms if slide_ms is None else slide_ms
    check_event_options(length_ms, slide, slack_ms, allowed_lateness_ms, late, max_skew_ms)
    return ef.EventWindowSpec(
        resolve_event_time(event_time),
        reduce,
        lift or ef.identity,
        length_ms,
        slide,
        slack_ms,
        allowed_lateness_ms,
        late,
        max_skew_ms,
    )


class EventWindow(StatefulComputation):
    """Open windows and the watermark of an event-time window, batch by batch."""

    def __init__(
        self, ctx: GraphContext, parent: BatchStream, spec: ef.EventWindowSpec, partitions: int
    ) -> None:
        super().__init__(ctx, parent, "event_window")
        self.spec = spec
        self.partitions = partitions
        self.params.update(spec.settings(), partitions=partitions)
        self._states: list[tuple[int, RDD]] = []
        self._figures: Any = None
        self.latest_figures: EventTimeFigures | None = None

    def compute(self, plan: BatchPlan) -> RDD:
        t = plan.batch_time
        if self.parent.is_empty(plan):
            # No record, so no window changes and the watermark stays: the batch emits nothing.
            self.decide_empty(t, True)
            return self._states[-1][1] if self._states else self.ctx.sc.emptyRDD()
        self.decide_empty(t, False)
        tag = partial(ef.tag_event_records, self.spec.event_time, self.partitions)
        tagged = self.parent.rdd_at(plan).mapPartitionsWithIndex(tag).partitionBy(self.partitions)
        inputs = [self._states[-1][1], tagged] if self._states else [tagged]
        union = union_partitioned(self.ctx.sc, inputs)
        merge = partial(ef.merge_event_partition, self.spec, t, self._accumulator())
        merged = persist(union.mapPartitionsWithIndex(merge, preservesPartitioning=True))
        self._states = [*self._states, (t, merged)]
        return merged

    def _accumulator(self) -> Any:
        if self._figures is None:
            self._figures = self.ctx.sc.accumulator({}, ef.FiguresParam())
        return self._figures

    def forget(self, batch_time: int) -> None:
        self._states = release_superseded(self._states)
        self._read_figures()

    def _read_figures(self) -> None:
        """Takes the figures the tasks of finished batches reported (driver side only): the
        latest batch's watermark and open windows, and running totals since this process
        started (a recomputed batch counts again, as a metric may)."""
        if self._figures is None or not self._figures.value:
            return
        reported = self._figures.value
        self._figures.value = {}
        latest = max(reported)
        watermark, open_windows = reported[latest][:2]
        before = self.latest_figures
        totals = [sum(figures[i] for figures in reported.values()) for i in (2, 3, 4)]
        if before is not None:
            totals = [
                a + b
                for a, b in zip(
                    totals, (before.emitted, before.corrections, before.late), strict=True
                )
            ]
        self.latest_figures = EventTimeFigures(latest, watermark, open_windows, *totals)

    def checkpoint_pieces(self, batch_time: int) -> list[Piece]:
        if self._states:
            rdd = self._states[-1][1].filter(ef.is_window_state)
        else:
            rdd = self.ctx.sc.parallelize([], self.partitions).partitionBy(self.partitions)
        return [Piece("windows", rdd, "pairs")]

    def restore(self, batch_time: int, pieces: dict[str, RDD]) -> None:
        for _, rdd in self._states:
            release(rdd)
        self._states = [(batch_time, persist(pieces["windows"]))]
