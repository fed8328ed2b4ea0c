"""The batch clock: one batch per interval, in order, never two at once.

Batch `t` runs once the batch clock reaches `t` (its data is what arrived before `t`). When a
batch overruns, the next one waits and starts late; the lateness is its scheduling delay. A stop
request lets the running batch finish and then returns.

The batch clock is the wall clock, made safe against steps (docs/architecture.md, Recovery): it
follows the wall clock forward, so a step forward makes the skipped intervals due at once and
they run as a driver's down time does (empty ones cheaply); it never runs slower than real time,
so a step back does not stall the batches behind a wall clock that must first catch up again.
A driver that starts with its wall clock behind the journal's last batch (it was stepped back,
or another host's clock wrote the journal) likewise carries on from the journal at once.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

log = logging.getLogger(__name__)

RunBatch = Callable[[int, float], None]
Wait = Callable[[float], bool]
"""Waits up to the given seconds; True when asked to stop meanwhile."""


def now_ms() -> int:
    return int(time.time() * 1000)


def monotonic_ms() -> int:
    return int(time.monotonic() * 1000)


class BatchClock:
    """The wall clock, except that it never runs slower than the monotonic clock: stepped
    forward it jumps with the wall clock, stepped back it carries on at real-time pace."""

    def __init__(
        self,
        wall_ms: Callable[[], int] = now_ms,
        monotonic: Callable[[], int] = monotonic_ms,
    ) -> None:
        self.wall_ms = wall_ms
        self.monotonic = monotonic
        self._reading: tuple[int, int] | None = None
        """The latest (batch clock, monotonic clock) reading, in ms."""

    def __call__(self) -> int:
        wall, now = self.wall_ms(), self.monotonic()
        if self._reading is not None:
            earlier, at = self._reading
            wall = max(wall, earlier + (now - at))
        self._reading = (wall, now)
        return wall

    def not_before(self, time_ms: int) -> int:
        """Moves the clock forward to `time_ms` when it is behind; returns by how many ms."""
        behind = time_ms - self()
        if behind > 0:
            self._reading = (time_ms, self.monotonic())
        return max(0, behind)


def align_down(time_ms: int, interval_ms: int) -> int:
    """The last batch time at or before `time_ms`.

    >>> align_down(1_234, 1_000), align_down(2_000, 1_000), align_down(499, 500)
    (1000, 2000, 0)
    """
    return time_ms // interval_ms * interval_ms


class Scheduler:
    """Runs `run_batch(t, scheduling_delay_s)` for t = first, first + interval, … until stopped."""

    def __init__(
        self, interval_ms: int, clock: BatchClock | None = None, wait: Wait | None = None
    ) -> None:
        self.interval_ms = interval_ms
        self.clock = clock if clock is not None else BatchClock()
        self.stopping = threading.Event()
        self.wait = wait if wait is not None else self.stopping.wait
        self.last_tick = time.monotonic()

    def stop(self) -> None:
        """Ask the loop to return after the batch in progress (safe from a signal handler)."""
        self.stopping.set()

    def run(
        self,
        first_batch_time: int,
        run_batch: RunBatch,
        max_batches: int | None = None,
        *,
        due_since_ms: int | None = None,
    ) -> int:
        """Runs batches until stopped (or `max_batches` ran); returns the next batch time.

        `due_since_ms`: the batch-clock time from which the first batch counts as waiting, when
        that is later than its batch time. A fresh start's first batch is the boundary just
        passed (`recovery.first_new_batch_time`); it waited for nothing before the driver was
        up, so its scheduling delay (which backpressure reads as a backlog) starts at zero."""
        batch_time = first_batch_time
        waiting_since = max(first_batch_time, due_since_ms or first_batch_time)
        behind_ms = self.clock.not_before(first_batch_time - self.interval_ms)
        if behind_ms > self.interval_ms:
            log.warning(
                "the wall clock is %.1f s behind the journal's next batch %d: batches carry on "
                "from the journal at real-time pace instead of waiting for the clock",
                behind_ms / 1000,
                first_batch_time,
            )
        ran = 0
        while not self.stopping.is_set() and (max_batches is None or ran < max_batches):
            wait_ms = batch_time - self.clock()
            if wait_ms > 0 and self.wait(wait_ms / 1000):
                break
            self.last_tick = time.monotonic()
            delay_s = max(0, self.clock() - max(batch_time, waiting_since)) / 1000
            run_batch(batch_time, delay_s)
            self.last_tick = time.monotonic()
            batch_time += self.interval_ms
            ran += 1
        return batch_time
