"""The PID rate controller's direction of travel, on made-up batch measurements."""

from __future__ import annotations

from service.observe.backpressure import RateController


def test_no_limit_before_the_first_measurement() -> None:
    assert RateController(1000, 10, None).rate_per_partition is None


def test_rate_falls_when_batches_overrun_and_rises_with_headroom() -> None:
    controller = RateController(1000, min_rate=10, max_rate_per_partition=10_000)
    controller.update(records=4000, processing_s=2.0, scheduling_delay_s=0, partitions=4)
    first = controller.rate_per_partition
    assert first == 500  # 2000 records/s processed over 4 partitions
    controller.update(records=4000, processing_s=4.0, scheduling_delay_s=3.0, partitions=4)
    slower = controller.rate_per_partition
    assert slower is not None and slower < first
    for _ in range(5):
        controller.update(records=1000, processing_s=0.1, scheduling_delay_s=0, partitions=4)
    faster = controller.rate_per_partition
    assert faster is not None and faster > slower


def test_rate_stays_within_bounds() -> None:
    controller = RateController(1000, min_rate=50, max_rate_per_partition=200)
    controller.update(records=10_000, processing_s=0.01, scheduling_delay_s=0, partitions=2)
    assert controller.rate_per_partition == 200
    for _ in range(10):
        controller.update(records=100, processing_s=100, scheduling_delay_s=50, partitions=2)
    assert controller.rate_per_partition == 50


def test_empty_batches_change_nothing() -> None:
    controller = RateController(1000, min_rate=1, max_rate_per_partition=None)
    controller.update(records=100, processing_s=1, scheduling_delay_s=0, partitions=1)
    controller.update(records=0, processing_s=0.2, scheduling_delay_s=0, partitions=1)
    assert controller.rate_per_partition == 100


def test_initial_rate_applies_before_the_first_measurement_within_the_maximum() -> None:
    assert RateController(1000, 10, 20, initial_rate=50).rate_per_partition == 20
    assert RateController(1000, 10, 500, initial_rate=50).rate_per_partition == 50
