"""Bodies of the event-time window operator: plain top-level functions with no Spark import.

They run on executors inside `mapPartitions` and pickle by reference, like
`service.graph.state_functions`; the wiring lives in `service.graph.event_window`.

Every record of an event-window state RDD is `(key, (tag, ...))`:

- `(key, (NEW, event_ms, index, position, value))`: a value of this batch, tagged with its input
  partition and position so that it is folded in input order on every replay;
- `(p, (MARK, newest_ms, ...))`: the newest distinct event times one input partition saw
  (`MARK_TIMES` at most, newest first), sent once to every state partition `p` (a small int
  hashes to itself), so each partition computes the same watermark from the whole batch without
  a job of its own. Several, not one: an event time more than `max_skew_ms` ahead of the
  watermark is refused (a clock years ahead must not close every window), and the newest time
  within that bound is then the watermark's candidate;
- `(p, (WM, watermark_ms | None))`: the stream's watermark, kept in every state partition;
- `(key, (WIN, start_ms, value, revision))`: an open window (`revision` -1: not emitted yet);
- `(key, (OUT, batch_ms, WindowResult))` and `(key, (LATE, batch_ms, LateRecord))`: what the
  batch emits; never checkpointed.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Generator, Iterable, Iterator
from dataclasses import dataclass, fields
from typing import Any, NamedTuple

NEW = 0
MARK = 1
WM = 2
WIN = 3
OUT = 4
LATE = 5

LATE_CHOICES = ("drop", "dead_letter")
# Distinct event times an input partition reports per batch. Only when more of its times than
# this are all beyond the skew bound does it advance no watermark this batch: a lag, never a jump.
MARK_TIMES = 16
# Five minutes: more than clocks that are merely unsynchronised drift, far less than a clock
# set to the wrong year, which would otherwise close every open window at once.
DEFAULT_MAX_SKEW_MS = 300_000


class WindowResult(NamedTuple):
    """One emission of the window `[start_ms, end_ms)` of `key`; revision 0 first, then one more
    for each correction a late record caused."""

    key: Any
    start_ms: int
    end_ms: int
    value: Any
    revision: int


class LateRecord(NamedTuple):
    """A record that arrived after every window it belongs to had closed."""

    key: Any
    value: Any
    event_ms: int
    watermark_ms: int
    reason: str


@dataclass(frozen=True)
class EventWindowSpec:
    """What the merge needs: how to read event times and fold values, and the durations (ms).

    A value enters its window as `lift(value)`, and `reduce(acc, lift(value))` folds later ones.
    """

    event_time: Callable[[Any], int]
    reduce: Callable[[Any, Any], Any]
    lift: Callable[[Any], Any]
    length_ms: int
    slide_ms: int
    slack_ms: int
    allowed_lateness_ms: int
    late: str
    max_skew_ms: int = DEFAULT_MAX_SKEW_MS
    """How far ahead of the watermark an event time may be; later ones are late records."""

    def settings(self) -> dict[str, Any]:
        """The durations and the late policy, as the graph's fingerprint records them (the
        functions are the job's code, not part of the graph's shape)."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name not in _FUNCTIONS}


_FUNCTIONS = ("event_time", "reduce", "lift")


def window_starts(event_ms: int, length_ms: int, slide_ms: int) -> list[int]:
    """Starts of the windows `[s, s + length)` that hold `event_ms` (s a multiple of the slide),
    oldest first.

    >>> window_starts(65_000, 60_000, 60_000)
    [60000]
    >>> window_starts(65_000, 60_000, 20_000)
    [20000, 40000, 60000]
    >>> window_starts(-1, 10, 10)
    [-10]
    """
    starts = []
    start = event_ms - event_ms % slide_ms
    while start > event_ms - length_ms:
        starts.append(start)
        start -= slide_ms
    starts.reverse()
    return starts


def advance(watermark: int | None, newest_ms: int | None, slack_ms: int) -> int | None:
    """The watermark after a batch whose newest event time is `newest_ms`: it never goes back.

    >>> advance(None, 90_000, 30_000), advance(70_000, 90_000, 30_000), advance(5, None, 1)
    (60000, 70000, 5)
    """
    if newest_ms is None:
        return watermark
    candidate = newest_ms - slack_ms
    return candidate if watermark is None or candidate > watermark else watermark


def skew_bound(watermark: int | None, max_skew_ms: int) -> int | None:
    """The newest event time a batch may take: `max_skew_ms` past the watermark (none without
    one)."""
    return None if watermark is None else watermark + max_skew_ms


def newest_within(marks: Iterable[tuple[int, ...]], bound: int | None) -> int | None:
    """The newest event time of the batch at most `bound`, from every input partition's MARK
    times (newest first). A full MARK with every time beyond the bound says nothing of its
    partition's older times, which therefore add nothing (the watermark lags, it never jumps).

    >>> newest_within([(90, 50), (10**12, 70)], 100), newest_within([(90,)], None)
    (90, 90)
    """
    found: int | None = None
    for times in marks:
        usable = [t for t in times if bound is None or t <= bound]
        if usable and (found is None or usable[0] > found):
            found = usable[0]
    return found


def is_closed(start_ms: int, spec: EventWindowSpec, watermark: int | None) -> bool:
    """A window can take nothing more once the watermark reached its end plus the lateness."""
    return (
        watermark is not None and start_ms + spec.length_ms + spec.allowed_lateness_ms <= watermark
    )


def identity(value: Any) -> Any:
    return value


def keyed_by_window(result: WindowResult) -> tuple[str, dict[str, Any]]:
    """A result as `("<key>@<start_ms>", fields)`: every revision of a window has one Kafka key.

    >>> keyed_by_window(WindowResult("home", 60_000, 120_000, 3, 1))[0]
    'home@60000'
    """
    return (f"{result.key}@{result.start_ms}", result._asdict())


def kafka_timestamp(record: Any) -> int:
    """A Kafka record's own timestamp (CreateTime or LogAppendTime, as the topic keeps it), for
    values that are `connectors.reader.SourceRecord`s (`event_time="kafka"`)."""
    stamp = record.timestamp_ms
    if stamp is None:
        msg = (
            f"record {record.topic}-{record.partition}@{record.offset} has no timestamp; "
            "event_time='kafka' needs records with CreateTime or LogAppendTime"
        )
        raise ValueError(msg)
    return int(stamp)


# --- executor side ---------------------------------------------------------------------------


def tag_event_records(
    event_time: Callable[[Any], int], partitions: int, index: int, rows: Iterable[Any]
) -> Iterator[tuple[Any, tuple[Any, ...]]]:
    """`(k, v) -> (k, (NEW, event_ms, index, position, v))`, then this input partition's newest
    distinct event times as a MARK for every state partition."""
    newest: list[int] = []  # ascending, at most MARK_TIMES
    for position, (key, value) in enumerate(rows):
        event_ms = int(event_time(value))
        if event_ms not in newest and (len(newest) < MARK_TIMES or event_ms > newest[0]):
            bisect.insort(newest, event_ms)
            del newest[:-MARK_TIMES]
        yield (key, (NEW, event_ms, index, position, value))
    if newest:
        for partition in range(partitions):
            yield (partition, (MARK, *reversed(newest)))


class _Partition:
    """One state partition while a batch is merged into it."""

    def __init__(self) -> None:
        self.watermark: int | None = None
        self.marks: list[tuple[int, ...]] = []
        self.windows: dict[tuple[Any, int], list[Any]] = {}
        self.news: list[tuple[int, int, Any, int, Any]] = []

    def take(self, rows: Iterable[tuple[Any, tuple[Any, ...]]]) -> None:
        for key, entry in rows:
            tag = entry[0]
            if tag == NEW:
                self.news.append((entry[2], entry[3], key, entry[1], entry[4]))
            elif tag == MARK:
                self.marks.append(entry[1:])
            elif tag == WM:
                self.watermark = entry[1]
            elif tag == WIN:
                self.windows[(key, entry[1])] = [entry[2], entry[3]]


def merge_event_partition(
    spec: EventWindowSpec,
    batch_time: int,
    figures: Any,
    index: int,
    rows: Iterable[tuple[Any, tuple[Any, ...]]],
) -> Iterator[tuple[Any, tuple[Any, ...]]]:
    """One state partition after one batch: new values folded into their open windows (judged
    against the watermark before the batch), the watermark advanced, windows it passed emitted
    (revision 0) and touched emitted windows corrected (revision + 1), closed windows freed."""
    part = _Partition()
    part.take(rows)
    touched: dict[tuple[Any, int], None] = {}
    late = yield from _fold_news(spec, batch_time, part, touched)
    newest = newest_within(part.marks, skew_bound(part.watermark, spec.max_skew_ms))
    watermark = advance(part.watermark, newest, spec.slack_ms)
    counts = [0, 0, 0]  # open windows, emissions, corrections
    for (key, start), slot in part.windows.items():
        end = start + spec.length_ms
        if watermark is not None and end <= watermark and (slot[1] < 0 or (key, start) in touched):
            slot[1] += 1
            counts[1] += 1
            counts[2] += slot[1] > 0
            result = WindowResult(key, start, end, slot[0], slot[1])
            yield (key, (OUT, batch_time, result))
        if not is_closed(start, spec, watermark):
            counts[0] += 1
            yield (key, (WIN, start, slot[0], slot[1]))
    yield (index, (WM, watermark))
    if figures is not None:
        figures.add({batch_time: (watermark, counts[0], counts[1], counts[2], late)})


def _fold_news(
    spec: EventWindowSpec,
    batch_time: int,
    part: _Partition,
    touched: dict[tuple[Any, int], None],
) -> Generator[tuple[Any, tuple[Any, ...]], None, int]:
    """Folds the batch's values in input order; returns how many were late for every window
    they belong to (yielding them as LATE records when they go to the dead letters)."""
    late = 0
    bound = skew_bound(part.watermark, spec.max_skew_ms)
    part.news.sort(key=lambda item: (item[0], item[1]))
    for _index, _position, key, event_ms, value in part.news:
        accepted = False
        too_far = bound is not None and event_ms > bound
        for start in [] if too_far else window_starts(event_ms, spec.length_ms, spec.slide_ms):
            if is_closed(start, spec, part.watermark):
                continue
            accepted = True
            slot = part.windows.get((key, start))
            if slot is None:
                part.windows[(key, start)] = [spec.lift(value), -1]
            else:
                slot[0] = spec.reduce(slot[0], spec.lift(value))
            touched[(key, start)] = None
        if not accepted:
            late += 1
            if spec.late == "dead_letter":
                yield (key, (LATE, batch_time, _late_record(spec, key, value, event_ms, part)))
    return late


def _late_record(
    spec: EventWindowSpec, key: Any, value: Any, event_ms: int, part: _Partition
) -> LateRecord:
    watermark = part.watermark if part.watermark is not None else event_ms
    reason = (
        f"event time {event_ms} ms is too late: every window holding it ended "
        f"{spec.allowed_lateness_ms} ms (the allowed lateness) or more before the watermark "
        f"{watermark} ms"
    )
    if event_ms > watermark + spec.max_skew_ms:
        reason = (
            f"event time {event_ms} ms is too far ahead: more than {spec.max_skew_ms} ms (the "
            f"maximum skew) past the watermark {watermark} ms; is the producer's clock wrong?"
        )
    return LateRecord(key, value, event_ms, watermark, reason)


def is_window_state(row: tuple[Any, tuple[Any, ...]]) -> bool:
    """The records a checkpoint keeps: open windows and the watermark."""
    return row[1][0] in (WM, WIN)


def emitted_in(batch_time: int, tag: int, rows: Iterable[Any]) -> Iterator[Any]:
    """What the batch `batch_time` emitted with `tag` (OUT: results, LATE: late records)."""
    for _key, entry in rows:
        if entry[0] == tag and entry[1] == batch_time:
            yield entry[2]


class FiguresParam:
    """Accumulator parameter of per-batch figures `{batch: (watermark, open, emitted,
    corrections, late)}`: every partition reports the same watermark, the counts add up."""

    def zero(self, value: dict[int, tuple[Any, ...]]) -> dict[int, tuple[Any, ...]]:
        return {}

    def addInPlace(  # noqa: N802 - Spark's name
        self, left: dict[int, tuple[Any, ...]], right: dict[int, tuple[Any, ...]]
    ) -> dict[int, tuple[Any, ...]]:
        for batch, figures in right.items():
            old = left.get(batch)
            if old is None:
                left[batch] = figures
            else:
                marks = [m for m in (old[0], figures[0]) if m is not None]
                watermark = max(marks) if marks else None
                left[batch] = (
                    watermark,
                    *(a + b for a, b in zip(old[1:], figures[1:], strict=True)),
                )
        return left
