"""The sink contract: idempotent writes keyed by `BatchKey`, and the driver's commit.

A `Sink` has four methods and one attribute. A batch's output is written in three steps:

1. On the driver, once at start-up: ``sink.setup(app, output)`` creates what the sink writes to.
2. Task `p` of batch `t` calls ``sink.write(BatchKey(app, output, t, p), rows)``: on an executor,
   or on the driver, after collecting the partition, when ``sink.writes_on_driver`` is true (for
   sinks whose state lives in the driver process: the console, the in-memory test sink). The write
   is idempotent on the key and atomic with the sink's own marker for that key: either the marker
   and all rows are committed, or neither is. A key already committed is skipped.
3. When every task has finished, the driver calls ``sink.commit(app, output, t, partitions)``;
   idempotent too. Only then does the driver journal the batch as completed.

At shutdown the driver calls ``sink.close()``, which releases the clients and connections the
sink opened in the driver process. It is idempotent, and a sink used after it opens new ones.

Sinks are pickled to executors, so they hold configuration only; connections are opened lazily on
the executor and cached per process.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
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
    """What one `write` call did: rows committed, or skipped as already committed.

    `opened_client` reports a cost, not an outcome (so results compare without it): the write
    had to set up a client first, e.g. a Kafka transactional producer whose
    `init_transactions()` fenced the id's previous holder, which costs far more than a write.
    """

    rows: int
    skipped: bool = False
    opened_client: bool = field(default=False, compare=False)


@runtime_checkable
class Sink(Protocol):
    """A destination that commits each `BatchKey` exactly once (see the module docstring)."""

    @property
    def writes_on_driver(self) -> bool:
        """True: `write` runs in the driver process on collected rows; False: on executors."""
        ...

    def setup(self, app: str, output: str) -> None:
        """Driver-side, once at start-up: create tables/topics/folders, check limits."""

    def write(self, key: BatchKey, rows: Iterable[Any]) -> WriteResult:
        """Commit `rows` under `key` unless `key` is already committed."""

    def commit(self, app: str, output: str, batch_time: int, partitions: int) -> None:
        """Driver-side: check or mark batch `batch_time` complete for this output. Idempotent."""

    def close(self) -> None:
        """Driver-side, at shutdown: release this process's clients. Idempotent."""


@runtime_checkable
class SizedByTasks(Protocol):
    """A sink that must know each write job's number of tasks before the job runs.

    The number of tasks of an output may change from batch to batch (a map-only job over a topic
    whose partitions grow, ranges split by size); it is a function of the batch's journaled plan,
    so a replay has the same number. The driver calls `prepare_tasks` before every write job that
    runs; it is idempotent, and cheap once the sink is ready for that many.
    """

    def prepare_tasks(self, app: str, output: str, tasks: int) -> None:
        """Driver-side: make ready for tasks `0 .. tasks - 1` of the next write job."""
