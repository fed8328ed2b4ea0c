"""Prometheus metrics of stateful streams and checkpoints (registered by `Metrics`).

Per stateful stream (label `stream`, bounded by the graph): keys and bytes of state as of the
latest checkpoint (counting them every batch would cost a Spark job). Checkpoints: seconds and
bytes per checkpoint (histograms), the batch time of the latest one (time since it is
`time() - dstreams_last_checkpoint_timestamp_seconds`), the interval between checkpoints (0 for a
stateless graph; an alert on the checkpoint's age counts in it and needs no configuration), and
completed batches whose state was recomputed during recovery.
"""

from __future__ import annotations

from service.observe.catalogue import MetricSet


class StateMetrics:
    def __init__(self, metrics: MetricSet) -> None:
        self._m = metrics

    def checkpoint_written(
        self, seconds: float, size: int, at: float, streams: dict[str, dict[str, int]]
    ) -> None:
        self._m.histogram("dstreams_checkpoint_seconds").observe(seconds)
        self._m.histogram("dstreams_checkpoint_bytes").observe(size)
        self._m.gauge("dstreams_last_checkpoint_timestamp_seconds").set(at)
        for name, figures in streams.items():
            self._m.gauge("dstreams_state_keys").labels(name).set(figures.get("keys", 0))
            self._m.gauge("dstreams_state_bytes").labels(name).set(figures.get("bytes", 0))

    def set_checkpoint_interval(self, seconds: float) -> None:
        self._m.gauge("dstreams_checkpoint_interval_seconds").set(seconds)

    def recomputed(self, batches: int) -> None:
        self._m.counter("dstreams_recovery_recomputed_batches_total").inc(batches)
