"""A plain-Python model of event-time windows, written for clarity, not speed: it keeps every
accepted record and recomputes each window's value from scratch whenever it emits."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import reduce as fold
from typing import Any

Record = tuple[Any, Any]  # (key, value)


@dataclass
class Model:
    event_time: Callable[[Any], int]
    lift: Callable[[Any], Any]
    """A value enters its window as `lift(value)`; `reduce` folds the later ones into it."""
    reduce: Callable[[Any, Any], Any]
    length_ms: int
    slide_ms: int
    slack_ms: int
    lateness_ms: int
    max_skew_ms: int = 300_000
    """Records more than this ahead of the watermark are late and do not move it."""
    watermark: int | None = None
    accepted: dict[tuple[Any, int], list[Any]] = field(default_factory=dict)
    revisions: dict[tuple[Any, int], int] = field(default_factory=dict)
    emitted: dict[tuple[Any, int], Any] = field(default_factory=dict)
    """The latest value emitted for each window (kept after the window is freed)."""
    late_total: int = 0

    def windows(self, event_ms: int) -> list[int]:
        """Every start s (a multiple of the slide) with s <= event_ms < s + length."""
        low = event_ms - self.length_ms + 1
        first = -(-low // self.slide_ms) * self.slide_ms  # the smallest multiple >= low
        return list(range(first, event_ms + 1, self.slide_ms))

    def too_far_ahead(self, event_ms: int) -> bool:
        return self.watermark is not None and event_ms > self.watermark + self.max_skew_ms

    def closed(self, start: int) -> bool:
        end = start + self.length_ms
        return self.watermark is not None and self.watermark >= end + self.lateness_ms

    def batch(self, records: list[Record]) -> tuple[list[tuple[Any, ...]], list[Record]]:
        """Results `(key, start, end, value, revision)` and late records of one batch."""
        touched: set[tuple[Any, int]] = set()
        late: list[Record] = []
        within = [(k, v) for k, v in records if not self.too_far_ahead(self.event_time(v))]
        for key, value in records:
            open_windows = [s for s in self.windows(self.event_time(value)) if not self.closed(s)]
            if not open_windows or (key, value) not in within:
                late.append((key, value))
                continue
            for start in open_windows:
                self.accepted.setdefault((key, start), []).append(value)
                touched.add((key, start))
        self.late_total += len(late)
        if within:
            newest = max(self.event_time(v) for _, v in within) - self.slack_ms
            self.watermark = newest if self.watermark is None else max(self.watermark, newest)
        return self._emit(touched), late

    def _emit(self, touched: set[tuple[Any, int]]) -> list[tuple[Any, ...]]:
        results = []
        for (key, start), values in list(self.accepted.items()):
            end = start + self.length_ms
            due = self.watermark is not None and end <= self.watermark
            first = (key, start) not in self.revisions
            if due and (first or (key, start) in touched):
                revision = self.revisions.get((key, start), -1) + 1
                self.revisions[(key, start)] = revision
                value = fold(self.reduce, [self.lift(v) for v in values])
                self.emitted[(key, start)] = value
                results.append((key, start, end, value, revision))
            if self.closed(start):
                del self.accepted[(key, start)]
        return results


def run(model: Model, batches: list[list[Record]]) -> tuple[list[list[Any]], list[list[Any]]]:
    """Results and late records of every batch, each batch sorted by repr."""
    results, lates = [], []
    for records in batches:
        emitted, late = model.batch(records)
        results.append(sorted(emitted, key=repr))
        lates.append(sorted(late, key=repr))
    return results, lates
