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
