"""A whole job's `build(ctx)` run on lists, batch by batch: the plugin's fast path, no broker.

    >>> run = run_job(sc, "examples.wordcount:build",
    ...               {"lines": [["a b", "a"], [], ["b"]]})  # doctest: +SKIP
    >>> run.output("counts")  # doctest: +SKIP
    [[('a', 2), ('b', 1)], [], [('b', 1)]]

The job is the same function the service runs (`job: module:function` in its config). Each
`ctx.source(name)` it asks for reads `inputs[name]`: the n-th list is batch n's values, empty
lists are empty batches, and a source whose lists ran out reads nothing. Every output the job
writes by name goes to one in-memory sink, so `run.output(name)` is that output's rows per batch,
empty batches kept. Windows and state carry over from batch to batch as in the service, and batch
times are `first_batch_ms`, `first_batch_ms + batch_interval_ms`, ... (the times event-time
operators and windows see), so a test controls them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from service.driver.preflight import Job, load_job
from service.errors import ConfigError
from service.graph.context import StreamingContext
from service.graph.dstream import DStream
from service.graph.sources import KafkaInputDStream
from service.testing import run_contexts
from sinks.memory import MemorySink

Inputs = Mapping[str, Sequence[Sequence[Any]]]
"""Per source name, one list of values per batch."""

DEFAULT_INTERVAL_MS = 1000


@dataclass(frozen=True)
class JobRun:
    """What a job wrote when `run_job` fed it: each output's rows per batch, in batch order."""

    batch_times: list[int]
    outputs: dict[str, list[list[Any]]]

    def output(self, name: str) -> list[list[Any]]:
        """The rows `name` wrote, one list per batch (empty batches kept)."""
        if name not in self.outputs:
            known = ", ".join(sorted(self.outputs)) or "none"
            msg = f"the job wrote no output {name!r}; it wrote: {known}"
            raise KeyError(msg)
        return self.outputs[name]

    def rows(self, name: str) -> list[Any]:
        """Every row `name` wrote, over all batches, in batch order."""
        return [row for batch in self.output(name) for row in batch]


class FedContext(StreamingContext):
    """A job's context whose sources are lists and whose named outputs all go to one memory sink.

    A `parse` function is applied to each value; unlike the service, a value it raises on fails
    the batch (the fast path has no dead-letter topic to send it to).
    """

    def __init__(self, sc: Any, inputs: Inputs, batch_interval_ms: int, partitions: int) -> None:
        self.memory = MemorySink()
        super().__init__(
            sc, "job-test", batch_interval_ms, partitions, sink_factory=lambda _: self.memory
        )
        self._inputs = {name: [list(batch) for batch in lists] for name, lists in inputs.items()}
        self._fed: dict[str, DStream] = {}

    def source(self, name: str, parse: Callable[[Any], Any] | None = None) -> DStream:
        if name not in self._inputs:
            known = ", ".join(sorted(self._inputs)) or "none"
            msg = (
                f"the job reads source {name!r}, but the test gave no input for it (given: {known})"
            )
            raise ConfigError(msg)
        if name not in self._fed:
            self._fed[name] = self.queue_stream(self._inputs[name], name)
        stream = self._fed[name]
        return stream if parse is None else stream.map(parse)

    def kafka_records(
        self, name: str, parse: Callable[[Any], Any] | None = None
    ) -> KafkaInputDStream:
        msg = (
            f"the job reads source {name!r} as Kafka records (topic, partition, offset); the fast "
            "path feeds values only: test this job on the real path (the `job_service` fixture)"
        )
        raise ConfigError(msg)

    def unread_inputs(self) -> list[str]:
        """Names the test gave input for that the job never asked for (a typo, most often)."""
        return sorted(set(self._inputs) - set(self._fed))


def run_job(
    sc: Any,
    job: Job | str,
    inputs: Inputs,
    *,
    batches: int | None = None,
    batch_interval_ms: int = DEFAULT_INTERVAL_MS,
    first_batch_ms: int | None = None,
    default_partitions: int = 2,
    sort: bool = True,
) -> JobRun:
    """Builds `job` (a `build(ctx)` function or `"module:function"`) on `inputs` and runs
    `batches` batches (default: as many as the longest input has); rows within each batch are
    sorted by `repr` unless `sort` is False, so results do not depend on partitioning."""
    ctx = FedContext(sc, inputs, batch_interval_ms, default_partitions)
    (load_job(job) if isinstance(job, str) else job)(ctx)
    if unread := ctx.unread_inputs():
        msg = f"the test gave input for {unread}, but the job never read those sources"
        raise ConfigError(msg)
    count = batches if batches is not None else max((len(b) for b in inputs.values()), default=0)
    first = first_batch_ms if first_batch_ms is not None else 1000 * batch_interval_ms
    times = [first + index * batch_interval_ms for index in range(count)]
    try:
        run_contexts(ctx, count, first_batch_ms=first)
    finally:
        ctx.close()
    # Outputs the job wrote by name; a `foreach_batch` or one given its own sink is not here.
    named = [out.name for out in ctx.outputs if getattr(out, "sink", None) is ctx.memory]
    outputs = {name: ctx.memory.batches(name) for name in named}
    if sort:
        outputs = {name: [sorted(b, key=repr) for b in got] for name, got in outputs.items()}
    return JobRun(times, outputs)
