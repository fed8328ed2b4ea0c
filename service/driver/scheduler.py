"""The batch clock: one batch per interval, in order, never two at once.

Batch `t` runs once the wall clock reaches `t` (its data is what arrived before `t`). When a batch
overruns, the next one waits and starts late; the lateness is its scheduling delay. A stop request
lets the running batch finish and then returns.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

RunBatch = Callable[[int, float], None]


def now_ms() -> int:
    return int(time.time() * 1000)


def align_up(time_ms: int, interval_ms: int) -> int:
    """The first batch time at or after `time_ms` (batch times are multiples of the interval).

    >>> align_up(1_234, 1_000), align_up(2_000, 1_000), align_up(0, 500)
    (2000, 2000, 0)
    """
    return -(-time_ms // interval_ms) * interval_ms


class Scheduler:
    """Runs `run_batch(t, scheduling_delay_s)` for t = first, first + interval, … until stopped."""

    def __init__(self, interval_ms: int, clock_ms: Callable[[], int] = now_ms) -> None:
        self.interval_ms = interval_ms
        self.clock_ms = clock_ms
        self.stopping = threading.Event()
        self.last_tick = time.monotonic()

    def stop(self) -> None:
        """Ask the loop to return after the batch in progress (safe from a signal handler)."""
        self.stopping.set()

    def run(
        self, first_batch_time: int, run_batch: RunBatch, max_batches: int | None = None
    ) -> int:
        """Runs batches until stopped (or `max_batches` ran); returns the next batch time."""
        batch_time = first_batch_time
        ran = 0
        while not self.stopping.is_set() and (max_batches is None or ran < max_batches):
            wait_ms = batch_time - self.clock_ms()
            if wait_ms > 0 and self.stopping.wait(wait_ms / 1000):
                break
            self.last_tick = time.monotonic()
            delay_s = max(0, self.clock_ms() - batch_time) / 1000
            run_batch(batch_time, delay_s)
            self.last_tick = time.monotonic()
            batch_time += self.interval_ms
            ran += 1
        return batch_time
