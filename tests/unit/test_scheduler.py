"""The scheduler's clock arithmetic, with a fake clock (no sleeping on real time)."""

from __future__ import annotations

from service.driver.scheduler import Scheduler, align_up


class FakeClock:
    def __init__(self, start: int) -> None:
        self.now = start

    def __call__(self) -> int:
        return self.now


def test_align_up() -> None:
    assert align_up(1000, 1000) == 1000
    assert align_up(1001, 1000) == 2000
    assert align_up(0, 500) == 0


def test_overrun_batches_queue_and_report_their_delay() -> None:
    clock = FakeClock(10_000)
    scheduler = Scheduler(1000, clock)
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
    scheduler = Scheduler(1000, clock)
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
    scheduler = Scheduler(1000, clock)
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
