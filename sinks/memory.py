"""In-memory test sink: records every committed key and insists on idempotency.

It runs on the driver (the output collects each partition's rows first), so tests can read it
back directly. Writing a key twice with the same rows is skipped, and committing a batch with an
unwritten partition is refused, as a real sink would; writing a key twice with different rows is
a determinism bug and fails loudly.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from service.errors import SinkError
from sinks.base import BatchKey, WithoutKafka, WriteResult


class MemorySink(WithoutKafka):
    """Keeps committed rows per `BatchKey` in this process."""

    writes_on_driver = True  # tests read what it holds in the driver process
    writes_in_parallel = False

    def __init__(self) -> None:
        self.parts: dict[BatchKey, list[Any]] = {}
        self.committed: dict[tuple[str, int], int] = {}
        self.duplicates_suppressed = 0

    def write(self, key: BatchKey, rows: Iterable[Any]) -> WriteResult:
        incoming = list(rows)
        # One step under the GIL: of concurrent writes of a key, exactly one stores its rows.
        existing = self.parts.setdefault(key, incoming)
        if existing is incoming:
            return WriteResult(rows=len(incoming))
        if sorted(map(repr, existing)) != sorted(map(repr, incoming)):
            msg = (
                f"{key} was written twice with different rows: first {existing!r}, "
                f"then {incoming!r}; the graph is not deterministic"
            )
            raise SinkError(msg)
        self.duplicates_suppressed += 1
        return WriteResult(rows=0, skipped=True)

    def commit(self, app: str, output: str, batch_time: int, partitions: int) -> None:
        """Records the batch as committed; refuses while one of its partitions is unwritten."""
        missing = [
            p for p in range(partitions) if BatchKey(app, output, batch_time, p) not in self.parts
        ]
        if missing:
            msg = (
                f"memory sink cannot commit {output} batch {batch_time}: partitions {missing} of "
                f"{partitions} were never written; expected all of them, replay the batch"
            )
            raise SinkError(msg)
        self.committed[(output, batch_time)] = partitions

    def close(self) -> None:
        """Nothing to release; what was written stays readable."""

    def batch_rows(self, output: str, batch_time: int) -> list[Any]:
        """All rows of one batch of one output, in partition order."""
        keys = sorted(k for k in self.parts if k.output == output and k.batch_time == batch_time)
        return [row for key in keys for row in self.parts[key]]

    def batches(self, output: str) -> list[list[Any]]:
        """Rows per committed batch, in batch order (empty batches included)."""
        times = sorted(t for (name, t) in self.committed if name == output)
        return [self.batch_rows(output, t) for t in times]
