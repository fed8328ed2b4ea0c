"""A task's partition ends where the executor ended it, never where a kill cut it
(docs/architecture.md, "Faults").

PySpark's worker reads a partition from the executor JVM as length-prefixed frames and takes
two different things for the end of it: the JVM's end-of-data marker, and a connection closed
before the next frame (or in the middle of one). Spark closes the connection of a task it kills:
a stage aborted after another task's last failure, a cancelled job, an executor shutting down.
A worker still waiting for its input then sees a short (often empty) partition end normally and
runs the rest of the task on it. In a task that writes a sink, that publishes part of a
partition as the whole of it, and the sink's idempotency makes the loss final: the retry, and
the replay after a restart, find the partition written and skip it. (Seen as an empty part of
the files sink when a full volume aborted its stage.)

`GuardedInput` wraps the function of such a task. When the worker unpickles the task, before
it reads any of the partition, the wrapper installs `strict_frames`: a frame cut short raises
`PartitionInputCut`, failing the task before its sink can commit. The end-of-data marker still
ends the partition. Only task processes change: the driver pickles tasks, it never unpickles
them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Generic, TypeVar

from service.errors import PartitionInputCut

__all__ = ["GuardedInput", "strict_frames", "lenient_frames"]

R = TypeVar("R")

# PySpark's own frame reader, kept while ours is installed (None: not installed).
_LENIENT_READ: Callable[[Any, Any], Any] | None = None


class GuardedInput(Generic[R]):
    """`function(index, rows)` for `mapPartitionsWithIndex`, with a partition that cannot end
    early in the worker that runs it (see the module docstring)."""

    def __init__(self, function: Callable[[int, Iterable[Any]], R]) -> None:
        self.function = function

    def __call__(self, index: int, rows: Iterable[Any]) -> R:
        return self.function(index, rows)

    def __setstate__(self, state: dict[str, Any]) -> None:
        # Unpickled in the worker with the rest of the task, before any of its input is read:
        # PySpark's own functions in the same task (a reduce's merge) may read all of it at once.
        self.__dict__.update(state)
        strict_frames()


class _WholeReads:
    """A stream whose `read(n)` returns `n` bytes or raises `PartitionInputCut`."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream

    def read(self, size: int) -> bytes:
        data: bytes = self._stream.read(size)
        if len(data) < size:
            msg = (
                f"this task's input ended {len(data)} bytes into a {size}-byte read, without the "
                "executor's end-of-data marker: Spark closed it while killing the task (a stage "
                "aborted, a job cancelled or an executor stopping); the task fails so that no "
                "part of its partition is written as the whole"
            )
            raise PartitionInputCut(msg)
        return data


def strict_frames() -> None:
    """From now on, this process's framed reads raise `PartitionInputCut` at a cut instead of
    ending the stream (idempotent)."""
    global _LENIENT_READ
    from pyspark.serializers import FramedSerializer

    if _LENIENT_READ is not None:
        return
    # PySpark's frame reader is private; pyproject pins pyspark to 4.1, and
    # tests/unit/test_partition_input.py checks the replacement against its serializers.
    lenient = FramedSerializer._read_with_length  # noqa: SLF001 - see above

    def read_whole_frame(self: Any, stream: Any) -> Any:
        return lenient(self, _WholeReads(stream))

    FramedSerializer._read_with_length = read_whole_frame  # noqa: SLF001 - see strict_frames
    _LENIENT_READ = lenient


def lenient_frames() -> None:
    """PySpark's own reads again (for tests that install the guard in their own process)."""
    global _LENIENT_READ
    from pyspark.serializers import FramedSerializer

    if _LENIENT_READ is not None:
        FramedSerializer._read_with_length = _LENIENT_READ  # noqa: SLF001 - see strict_frames
        _LENIENT_READ = None
