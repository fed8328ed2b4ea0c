"""Adaptive rate control: a PID controller on the ingestion rate, as in Spark Streaming.

After each batch the controller compares the rate it allowed with the rate the batch was actually
processed at. The proportional term tracks that difference, the integral term drains the backlog
that scheduling delay reveals, and the derivative term damps swings. The result is a total
records/s budget for the next batch, shared evenly by the partitions that had data.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class PidGains:
    proportional: float = 1.0
    integral: float = 0.2
    derivative: float = 0.0


class RateController:
    """Computes the per-partition rate (records/s) the planner should allow next."""

    def __init__(
        self,
        interval_ms: int,
        min_rate: float,
        max_rate_per_partition: float | None,
        gains: PidGains = PidGains(),  # noqa: B008 - immutable value
        *,
        initial_rate: float | None = None,
    ) -> None:
        self.interval_s = interval_ms / 1000
        self.min_rate = min_rate
        self.max_rate_per_partition = max_rate_per_partition
        self.gains = gains
        self.initial_rate = initial_rate
        self._total_rate: float | None = None
        self._last_error = 0.0
        self._partitions = 1

    @property
    def rate_per_partition(self) -> float | None:
        """The limit in force. Before the first measurement: `initial_rate`, or None (only the
        maximum applies)."""
        if self._total_rate is None:
            rate = self.initial_rate
            if rate is None:
                return None
        else:
            rate = self._total_rate / self._partitions
        if self.max_rate_per_partition is not None:
            rate = min(rate, self.max_rate_per_partition)
        return rate

    def update(
        self, records: int, processing_s: float, scheduling_delay_s: float, partitions: int
    ) -> float | None:
        """Feeds one finished batch; returns the new per-partition rate."""
        if records <= 0 or processing_s <= 0:
            return self.rate_per_partition  # nothing learned from an empty batch
        self._partitions = max(1, partitions)
        processed_rate = records / processing_s
        if self._total_rate is None:
            self._total_rate = processed_rate
            return self.rate_per_partition
        error = self._total_rate - processed_rate
        # Records waiting because of scheduling delay, expressed as a rate over one interval.
        backlog = scheduling_delay_s * processed_rate / self.interval_s
        change = (error - self._last_error) / self.interval_s
        self._last_error = error
        new_rate = (
            self._total_rate
            - self.gains.proportional * error
            - self.gains.integral * backlog
            - self.gains.derivative * change
        )
        self._total_rate = max(new_rate, self.min_rate * self._partitions)
        if self.max_rate_per_partition is not None:
            self._total_rate = min(self._total_rate, self.max_rate_per_partition * self._partitions)
        return self.rate_per_partition
