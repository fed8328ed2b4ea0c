"""Prometheus metrics of stateful streams and checkpoints (registered by `Metrics`).

Per stateful stream (label `stream`, bounded by the graph): keys and bytes of state as of the
latest checkpoint (counting them every batch would cost a Spark job). Checkpoints: seconds and
bytes per checkpoint (histograms), the batch time of the latest one (time since it is
`time() - dstreams_last_checkpoint_timestamp_seconds`), the interval between checkpoints (0 for a
stateless graph; an alert on the checkpoint's age counts in it and needs no configuration), and
completed batches whose state was recomputed during recovery.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from service.observe.declare import Declare

# A checkpoint writes every state partition once: from milliseconds to minutes for huge state.
CHECKPOINT_SECONDS_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)
CHECKPOINT_BYTES_BUCKETS = tuple(float(4**n * 1024) for n in range(0, 13))  # 1 KiB .. 16 GiB


class StateMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        declare = Declare(registry)
        self._seconds = declare.histogram(
            "dstreams_checkpoint_seconds",
            "Time to write a checkpoint (files, journal record, lineage cut).",
            CHECKPOINT_SECONDS_BUCKETS,
        )
        self._bytes = declare.histogram(
            "dstreams_checkpoint_bytes", "Bytes written by a checkpoint.", CHECKPOINT_BYTES_BUCKETS
        )
        self._last = declare.gauge(
            "dstreams_last_checkpoint_timestamp_seconds",
            "Wall-clock time the latest checkpoint was journaled, in seconds since the epoch.",
        )
        self._interval = declare.gauge(
            "dstreams_checkpoint_interval_seconds",
            "Seconds of batches between checkpoints (checkpoint.interval_batches times the batch "
            "interval); 0 for a stateless graph, which never checkpoints.",
        )
        self._keys = declare.gauge(
            "dstreams_state_keys", "Keys of state at the latest checkpoint.", "stream"
        )
        self._state_bytes = declare.gauge(
            "dstreams_state_bytes",
            "Bytes of a stream's checkpointed state (an estimate of its size in memory).",
            "stream",
        )
        self._recomputed = declare.counter(
            "dstreams_recovery_recomputed_batches_total",
            "Completed batches whose state recovery recomputed from the journal.",
        )

    def checkpoint_written(
        self, seconds: float, size: int, at: float, streams: dict[str, dict[str, int]]
    ) -> None:
        self._seconds.observe(seconds)
        self._bytes.observe(size)
        self._last.set(at)
        for name, figures in streams.items():
            self._keys.labels(name).set(figures.get("keys", 0))
            self._state_bytes.labels(name).set(figures.get("bytes", 0))

    def set_checkpoint_interval(self, seconds: float) -> None:
        self._interval.set(seconds)

    def recomputed(self, batches: int) -> None:
        self._recomputed.inc(batches)
