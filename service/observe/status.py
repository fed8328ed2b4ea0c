"""What the service is doing now: the data of Spark's Streaming tab, for `/status` and the page.

The engine reports batches as they start and finish; the HTTP server reads `snapshot()`. The board
holds only what it is given here: names, offsets, counts and timings. No settings object is ever
passed in, so no secret can reach `/status`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from connectors.offsets import OffsetRange

RUNNING = "running"
# Where the driver is in its start (`/startupz`, `/healthz`'s body): Spark and the start-up
# checks, a warm standby waiting to be elected, recovery (replaying the journal), then running
# once the first batch after recovery completed (docs/architecture.md, Observability).
STARTING, STANDBY, RECOVERING = "starting", "standby", "recovering"
PHASES = (STARTING, STANDBY, RECOVERING, RUNNING)
# Batches kept for /status: at 1 s batches, the last few minutes.
DEFAULT_MAX_BATCHES = 200
NOT_READY_YET = "recovering or waiting for the first batch to complete"


@dataclass
class _Batch:
    """One row of the table; mutated only under the board's lock."""

    batch_time: int
    ranges: tuple[OffsetRange, ...] = ()
    scheduling_delay_s: float | None = None
    records_in: int | None = None
    outputs: dict[str, int] = field(default_factory=dict)
    processing_s: float | None = None
    outcome: str = RUNNING
    breakdown: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "batch_time": self.batch_time,
            "batch_time_iso": _iso(self.batch_time),
            "ranges": [r.to_json() for r in self.ranges],
            "planned_records": sum(r.count for r in self.ranges),
            "records_in": self.records_in,
            "outputs": dict(self.outputs),
            "processing_s": self.processing_s,
            "scheduling_delay_s": self.scheduling_delay_s,
            "outcome": self.outcome,
            "breakdown": self.breakdown,
            "end_to_end_s": _end_to_end_bounds(self.breakdown),
        }


def _end_to_end_bounds(breakdown: dict[str, Any] | None) -> dict[str, float] | None:
    """The batch's least and greatest end-to-end latency over its outputs, if measured."""
    spans = [
        output["end_to_end_s"]
        for output in (breakdown or {}).get("outputs", {}).values()
        if output.get("end_to_end_s")
    ]
    if not spans:
        return None
    return {"min": min(s["min"] for s in spans), "max": max(s["max"] for s in spans)}


class StatusBoard:
    """Thread-safe record of recent batches, the epoch, readiness and the scheduler's heartbeat.

    `healthy()` is false once the scheduler has not called `heartbeat()` for `wedged_after_s`
    (default: 10 batch intervals, at least 30 s). The board's creation counts as the first
    heartbeat, so a recovery that hangs is noticed as well.
    """

    def __init__(
        self,
        app_id: str,
        batch_interval_ms: int,
        *,
        max_batches: int = DEFAULT_MAX_BATCHES,
        wedged_after_s: float | None = None,
        clock: Callable[[], float] = time.monotonic,
        heartbeat_source: Callable[[], float] | None = None,
    ) -> None:
        self._app_id = app_id
        self._batch_interval_ms = batch_interval_ms
        self._max_batches = max_batches
        self._wedged_after_s = wedged_after_s or max(30.0, 10 * batch_interval_ms / 1000)
        self._clock = clock
        self._lock = threading.Lock()
        self._batches: dict[int, _Batch] = {}
        self._epoch: int | None = None
        self._ready = False
        self._phase = STARTING
        self._phase_since = clock()
        self._replayed_in_recovery = 0
        self._not_ready_because = NOT_READY_YET
        self._last_heartbeat = clock()
        # Optional pull-based heartbeat: returns the scheduler's last tick on the same clock.
        self.heartbeat_source = heartbeat_source
        self._totals = {"completed": 0, "failed": 0, "records_in": 0}
        self._checkpoints: list[dict[str, Any]] = []
        self._watermarks: dict[str, dict[str, Any]] = {}

    # --- Reported by the engine ---------------------------------------------------------------

    def batch_started(
        self, batch_time: int, ranges: Iterable[OffsetRange], scheduling_delay_s: float
    ) -> None:
        """Batch `batch_time` (ms) starts with its planned (journaled) ranges."""
        with self._lock:
            batch = self._row(batch_time)
            batch.ranges = tuple(ranges)
            batch.scheduling_delay_s = scheduling_delay_s
            batch.outcome = RUNNING

    def batch_finished(
        self,
        batch_time: int,
        records_in: int,
        outputs: Mapping[str, int],
        processing_s: float,
        outcome: str,
    ) -> None:
        """Batch `batch_time` is done: records read, records written per output, how it ended."""
        with self._lock:
            batch = self._row(batch_time)
            batch.records_in = records_in
            batch.outputs = {str(name): int(count) for name, count in outputs.items()}
            batch.processing_s = processing_s
            batch.outcome = str(outcome)
            if outcome in ("completed", "failed"):
                self._totals[outcome] += 1
            if outcome == "replayed" and self._phase == RECOVERING:
                self._replayed_in_recovery += 1
            self._totals["records_in"] += records_in

    def batch_breakdown(self, batch_time: int, breakdown: Mapping[str, Any]) -> None:
        """Where batch `batch_time`'s time went: `{"steps": {step: s}, "outputs": {name: {...}}}`
        as `service.observe.observer.batch_breakdown` builds it (JSON-able values only)."""
        with self._lock:
            self._row(batch_time).breakdown = dict(breakdown)

    def checkpoint_written(self, batch_time: int, seconds: float, size: int) -> None:
        """A checkpoint of `batch_time` was journaled; shown on the status page's timelines."""
        with self._lock:
            entry = {"batch_time": batch_time, "seconds": round(seconds, 3), "bytes": size}
            self._checkpoints = [*self._checkpoints[-(CHECKPOINTS_SHOWN - 1) :], entry]

    def set_watermarks(
        self, batch_time: int, streams: Mapping[str, tuple[int | None, int]]
    ) -> None:
        """Each event-time stream's `(watermark ms, open windows)` after batch `batch_time`."""
        with self._lock:
            self._watermarks = {
                name: {
                    "watermark_ms": mark,
                    "lag_ms": None if mark is None else batch_time - mark,
                    "open_windows": windows,
                }
                for name, (mark, windows) in sorted(streams.items())
            }

    def set_epoch(self, epoch: int) -> None:
        with self._lock:
            self._epoch = epoch

    def set_ready(self, ready: bool = True, because: str = NOT_READY_YET) -> None:
        """Ready once recovery finished and the first batch completed (`/readyz`); that batch
        also ends the start (phase running, `/startupz`). `because` says why not, when not."""
        with self._lock:
            self._ready = ready
            self._not_ready_because = because
        if ready:
            self.set_phase(RUNNING)

    def set_phase(self, phase: str) -> None:
        """The driver entered `phase` (one of PHASES)."""
        if phase not in PHASES:
            msg = f"phase {phase!r} is not one of {', '.join(PHASES)}"
            raise ValueError(msg)
        with self._lock:
            if phase != self._phase:
                self._phase, self._phase_since = phase, self._clock()
            if phase == RECOVERING:
                self._replayed_in_recovery = 0

    def heartbeat(self) -> None:
        """The scheduler is alive; call it at least once per batch interval."""
        with self._lock:
            self._last_heartbeat = self._clock()

    # --- Read by the HTTP server ----------------------------------------------------------------

    @property
    def ready(self) -> bool:
        with self._lock:
            return self._ready

    def started(self) -> tuple[bool, str]:
        """(started, progress): started once the first batch after recovery completed, or while
        a warm standby waits (it has nothing to recover until elected). Kubernetes' startup probe
        holds liveness off until then, so a long recovery is never taken for a wedged driver."""
        with self._lock:
            phase, replayed = self._phase, self._replayed_in_recovery
            seconds = self._clock() - self._phase_since
        progress = f"{phase} for {seconds:.0f}s"
        if phase == RECOVERING:
            progress += f", {replayed} batches replayed so far"
        elif phase == STARTING:
            progress += " (Spark and the start-up checks)"
        return phase in (STANDBY, RUNNING), progress

    @property
    def not_ready_because(self) -> str:
        with self._lock:
            return self._not_ready_because

    def healthy(self) -> tuple[bool, str]:
        """(alive, why): alive while the scheduler's heartbeat (pushed or pulled) is recent."""
        age = self._heartbeat_age()
        if age <= self._wedged_after_s:
            return True, f"scheduler heartbeat {age:.1f}s ago"
        return False, (
            f"scheduler heartbeat {age:.1f}s ago, expected within {self._wedged_after_s:.0f}s; "
            "the scheduler is wedged"
        )

    def snapshot(self) -> dict[str, Any]:
        """JSON-able: app, epoch, readiness, health, totals and recent batches, oldest first."""
        age = self._heartbeat_age()
        healthy = age <= self._wedged_after_s
        started, progress = self.started()
        with self._lock:
            batches = [self._batches[t].to_json() for t in sorted(self._batches)]
            return {
                "app": self._app_id,
                "epoch": self._epoch,
                "ready": self._ready,
                "healthy": healthy,
                "phase": self._phase,
                "started": started,
                "start_progress": progress,
                "heartbeat_age_s": round(age, 3),
                "batch_interval_ms": self._batch_interval_ms,
                "totals": dict(self._totals),
                "now": _iso(int(time.time() * 1000)),
                "batches": batches,
                "checkpoints": list(self._checkpoints),
                "watermarks": dict(self._watermarks),
            }

    def _heartbeat_age(self) -> float:
        source = self.heartbeat_source
        pulled = source() if source is not None else None
        with self._lock:
            last = self._last_heartbeat if pulled is None else max(pulled, self._last_heartbeat)
            return self._clock() - last

    def _row(self, batch_time: int) -> _Batch:
        """The row of `batch_time`; a new row pushes the oldest out beyond the bound."""
        batch = self._batches.get(batch_time)
        if batch is None:
            batch = self._batches[batch_time] = _Batch(batch_time)
            while len(self._batches) > self._max_batches:
                del self._batches[min(self._batches)]
        return batch


CHECKPOINTS_SHOWN = 20


def _iso(millis: int) -> str:
    moment = datetime.fromtimestamp(millis / 1000, tz=UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")
