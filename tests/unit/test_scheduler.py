"""The scheduler's clock arithmetic, with a fake clock (no sleeping on real time)."""

from __future__ import annotations

from service.driver.scheduler import BatchClock, Scheduler, align_down

HOUR_MS = 3_600_000


class FakeClock:
    def __init__(self, start: int) -> None:
        self.now = start

    def __call__(self) -> int:
        return self.now


class FakeTime:
    """A wall clock the test can step, and a monotonic clock that only real waits move."""

    def __init__(self, wall_ms: int) -> None:
        self.wall = FakeClock(wall_ms)
        self.monotonic = FakeClock(0)
        self.waited_ms = 0

    def pass_ms(self, ms: int) -> None:
        self.wall.now += ms
        self.monotonic.now += ms

    def wait(self, seconds: float) -> bool:
        self.waited_ms += round(seconds * 1000)
        self.pass_ms(round(seconds * 1000))
        return False

    def scheduler(self, interval_ms: int = 1000) -> Scheduler:
        return Scheduler(interval_ms, BatchClock(self.wall, self.monotonic), self.wait)

    def run(
        self, first: int, batches: int, batch_ms: int, step_at: int | None = None, step_ms: int = 0
    ) -> list[tuple[int, float]]:
        """(batch time, delay) of `batches` batches of `batch_ms` each, from `first`; the wall
        clock steps by `step_ms` at the end of batch `step_at`."""
        seen: list[tuple[int, float]] = []

        def batch(batch_time: int, delay_s: float) -> None:
            seen.append((batch_time, delay_s))
            self.pass_ms(batch_ms)
            if batch_time == step_at:
                self.wall.now += step_ms  # an NTP step, or an operator's `date -s`

        self.scheduler().run(first, batch, max_batches=batches)
        return seen


def test_align_down() -> None:
    assert align_down(1000, 1000) == 1000
    assert align_down(1999, 1000) == 1000
    assert align_down(499, 500) == 0


def test_a_fresh_start_runs_its_first_batch_at_once_with_no_delay() -> None:
    # The driver is up at 12,700: batch 12,000 runs at once; it waited for nothing, so its delay
    # counts from 12,700, while the next batch, 13,000, waits for its boundary as usual.
    from service.driver.recovery import first_new_batch_time
    from service.journal.base import JournalState

    time = FakeTime(12_700)
    first = first_new_batch_time(JournalState.from_records([]), 1000, clock_ms=12_700)
    seen: list[tuple[int, float]] = []

    def batch(batch_time: int, delay_s: float) -> None:
        seen.append((batch_time, delay_s))
        time.pass_ms(100)

    time.scheduler().run(first, batch, max_batches=2, due_since_ms=12_700)
    assert seen == [(12_000, 0.0), (13_000, 0.0)]
    assert time.waited_ms == 200  # from 12,800 to 13,000; none before the first batch


def test_without_due_since_a_past_first_batch_reports_its_whole_delay() -> None:
    time = FakeTime(12_700)
    seen: list[tuple[int, float]] = []
    time.scheduler().run(12_000, lambda t, d: seen.append((t, d)), max_batches=1)
    assert seen == [(12_000, 0.7)]


def test_overrun_batches_queue_and_report_their_delay() -> None:
    clock = FakeClock(10_000)
    scheduler = Scheduler(1000, BatchClock(clock, lambda: 0))
    seen: list[tuple[int, float]] = []

    def slow_batch(batch_time: int, delay_s: float) -> None:
        seen.append((batch_time, delay_s))
        clock.now += 2500  # each batch takes 2.5 intervals

    scheduler.run(10_000, slow_batch, max_batches=3)
    assert seen == [(10_000, 0.0), (11_000, 1.5), (12_000, 3.0)]


def test_after_an_outage_every_interval_of_the_down_time_runs_back_to_back() -> None:
    # Recovery hands the scheduler the interval after the last journaled batch (9,000); the
    # driver is back at 18,400: batches 10,000 to 18,000 are all due, and none is skipped.
    from service.driver.recovery import first_new_batch_time
    from service.journal.base import JournalState
    from service.journal.records import CompletedRecord, PlannedRecord

    journal = [PlannedRecord(1, 9_000, (), "f"), CompletedRecord(1, 9_000, {})]
    first = first_new_batch_time(JournalState.from_records(journal), 1000, clock_ms=18_400)
    clock = FakeClock(18_400)
    scheduler = Scheduler(1000, BatchClock(clock, lambda: 0))
    seen: list[tuple[int, float]] = []

    def quick_batch(batch_time: int, delay_s: float) -> None:
        seen.append((batch_time, delay_s))
        clock.now += 10

    assert scheduler.run(first, quick_batch, max_batches=9) == 19_000
    assert [t for t, _ in seen] == list(range(10_000, 18_001, 1000))
    assert seen[0] == (10_000, 8.4)
    assert seen[-1] == (18_000, 0.48)  # nine batches of 10 ms ran back to back


def test_stop_returns_after_the_running_batch() -> None:
    clock = FakeClock(0)
    scheduler = Scheduler(1000, BatchClock(clock, lambda: 0))
    seen: list[int] = []

    def batch(batch_time: int, _delay: float) -> None:
        seen.append(batch_time)
        clock.now += 1000
        scheduler.stop()

    assert scheduler.run(0, batch) == 1000
    assert seen == [0]


def test_local_master_gets_task_retries() -> None:
    from service.driver.spark import with_task_retries

    assert with_task_retries("local[2]") == "local[2,4]"
    assert with_task_retries("local[*]") == "local[*,4]"
    assert with_task_retries("local[2,3]") == "local[2,3]"
    assert with_task_retries("spark://host:7077") == "spark://host:7077"


def test_a_wall_clock_stepped_back_does_not_stall_the_batches() -> None:
    time = FakeTime(10_000)
    seen = time.run(10_000, 6, 100, step_at=12_000, step_ms=-HOUR_MS)
    assert [t for t, _ in seen] == list(range(10_000, 15_001, 1000))
    # Each batch waited out the rest of its interval in real time, not the hour the wall clock
    # fell back: 6 batches of 0.1 s in 5.1 s of real time.
    assert time.waited_ms == 4_500
    assert time.monotonic.now == 5_100


def test_a_wall_clock_stepped_forward_makes_the_skipped_intervals_due_at_once() -> None:
    time = FakeTime(10_000)
    seen = time.run(10_000, 5, 10, step_at=10_000, step_ms=HOUR_MS)
    assert [t for t, _ in seen] == list(range(10_000, 14_001, 1000))
    # As after a driver's down time: due at once, run back to back, nothing skipped.
    assert time.waited_ms == 0
    assert seen[1][1] > 3_590


def test_a_restart_with_the_wall_clock_behind_the_journal_carries_on_at_once() -> None:
    # The journal's last batch is an hour ahead of this host's clock (stepped back since, or
    # written by a host whose clock was ahead): waiting for the wall clock would stall an hour.
    time = FakeTime(10_000)
    first = 10_000 + HOUR_MS
    seen = time.run(first, 3, 100)
    assert [t for t, _ in seen] == [first, first + 1000, first + 2000]
    assert time.waited_ms == 2_800  # one interval per batch after the first, none for the hour


def test_the_batch_clock_follows_the_wall_clock_when_it_moves_forward() -> None:
    time = FakeTime(50_000)
    clock = BatchClock(time.wall, time.monotonic)
    assert clock() == 50_000
    time.pass_ms(250)
    assert clock() == 50_250
    time.wall.now += 7  # a slewed wall clock that runs slightly fast is followed
    assert clock() == 50_257
    time.wall.now -= 1_000  # stepped back: real time still passes
    time.pass_ms(100)
    assert clock() == 50_357
