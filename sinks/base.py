"""The sink contract: two small idempotent methods.

A batch's output is written in three steps:

1. On executors, task `p` of batch `t` calls ``sink.write(BatchKey(app, output, t, p), rows)``.
   The write is idempotent on the key and atomic with the sink's own marker for that key: either the
   marker and all rows are committed, or neither is. A key already committed is skipped.
2. When every task has finished, the driver calls ``sink.commit(t, partitions)``; idempotent too.
3. Only then does the driver journal the batch as completed.

Sinks are pickled to executors, so they hold configuration only; connections are opened lazily on
the executor and cached per process.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable


@dataclass(frozen=True, order=True)
class BatchKey:
    """Names one task's share of one batch of one output; the unit of idempotence.

    >>> key = BatchKey("wordcount", "counts", 1_700_000_000_000, 3)
    >>> key.to_json()
    {'app': 'wordcount', 'output': 'counts', 'batch_time': 1700000000000, 'partition': 3}
    >>> BatchKey.from_json(key.to_json()) == key
    True

    Keys order by app, output, batch time, then partition:

    >>> sorted([BatchKey("a", "o", 2000, 0), BatchKey("a", "o", 1000, 1)])[0].batch_time
    1000
    """

    app: str
    output: str
    batch_time: int
    partition: int

    def to_json(self) -> dict[str, Any]:
        return {
            "app": self.app,
            "output": self.output,
            "batch_time": self.batch_time,
            "partition": self.partition,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> BatchKey:
        return cls(
            str(data["app"]), str(data["output"]), int(data["batch_time"]), int(data["partition"])
        )


@dataclass(frozen=True)
class WriteResult:
    """What one `write` call did: rows committed, or skipped as already committed."""

    rows: int
    skipped: bool = False


@runtime_checkable
class Sink(Protocol):
    """A destination that commits each `BatchKey` exactly once."""

    def setup(self, app: str, output: str) -> None:
        """Driver-side, once at start-up: create tables/topics/folders, check limits."""

    def write(self, key: BatchKey, rows: Iterable[Any]) -> WriteResult:
        """Executor-side: commit `rows` under `key` unless `key` is already committed."""

    def commit(self, app: str, output: str, batch_time: int, partitions: int) -> None:
        """Driver-side: mark batch `batch_time` complete for this output. Idempotent."""
