"""The graph's shared vocabulary: what a stream needs of its context, what an output needs of its
stream, and what an output and a whole batch report.

These protocols let `dstream`, `sources`, `outputs` and `context` import each other in one
direction only (context → sources → dstream → outputs → base): a stream knows its context only
through `GraphContext`, an output knows its stream only through `BatchStream`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from service.graph.counters import Counts, record_timestamps, total_decode_errors, total_records
from service.graph.jobs import SparkJob
from service.graph.placement import OutputPlacement
from service.graph.plan import BatchPlan
from sinks.base import KafkaNeeds, Sink

RDD = Any  # pyspark.RDD; kept as Any because pyspark's types are not followed (see pyproject).
BatchFunction = Callable[[RDD, int], Any]


@dataclass(frozen=True)
class OutputResult:
    """What one output operation did for one batch."""

    name: str
    partitions: int
    rows: int
    skipped_partitions: int
    seconds: float = 0.0
    opened_clients: int = 0
    """Partitions whose write had to set up a sink client first (e.g. a Kafka producer)."""
    jobs: tuple[SparkJob, ...] = ()
    """The Spark jobs the output ran (see `service.graph.jobs`)."""
    write_seconds: float = 0.0
    """The slowest task's time inside `sink.write`, not counting computing the rows it wrote."""
    commit_seconds: float = 0.0
    """The driver's `sink.commit` (set by the lifecycle once it has committed)."""
    committed_at: float | None = None
    """Wall-clock time (s since the Unix epoch) of the commit: where end-to-end latency ends."""


@dataclass(frozen=True)
class BatchOutcome:
    """What a batch did, for metrics, the status page and logs."""

    plan: BatchPlan
    outputs: tuple[OutputResult, ...]
    processing_s: float
    replayed: bool
    counters: Counts = field(default_factory=dict)
    steps: dict[str, float] = field(default_factory=dict)
    """Seconds per lifecycle step, in order (plan, journal_planned, run_outputs, ...)."""

    @property
    def record_timestamps(self) -> tuple[int, int] | None:
        """(earliest, latest) Kafka record timestamp in ms the batch read, if any."""
        return record_timestamps(self.counters)

    @property
    def input_records(self) -> int:
        """Records the batch read, those that failed to decode included."""
        return total_records(self.counters)

    @property
    def decode_errors(self) -> int:
        """Records that failed to decode, or whose parse function raised."""
        return total_decode_errors(self.counters)


class BatchStream(Protocol):
    """What an output needs of the stream it writes."""

    @property
    def node_id(self) -> int: ...

    def rdd_at(self, plan: BatchPlan) -> RDD: ...

    def is_empty(self, plan: BatchPlan) -> bool: ...


class OutputOperation(Protocol):
    """An output of the graph: the only place where a batch's RDDs become Spark jobs."""

    @property
    def name(self) -> str: ...

    @property
    def exactly_once(self) -> bool: ...

    def describe(self) -> dict[str, Any]: ...

    def setup(self, app: str) -> None: ...

    def kafka_needs(self, app: str) -> KafkaNeeds:
        """What the output's sink needs of the Kafka cluster (the driver's start-up checks)."""
        ...

    @property
    def writes_on_driver(self) -> bool:
        """Whether the driver writes the batch's rows (after collecting them), not its tasks."""
        ...

    def run(self, app: str, plan: BatchPlan) -> OutputResult: ...

    def commit(self, app: str, batch_time: int, result: OutputResult) -> None: ...

    def forget_before(self, app: str, batch_time: int) -> None:
        """No batch before `batch_time` is written again: its sink markers may go."""

    def close(self) -> None:
        """Releases what the output holds in this process (its sink's clients); idempotent."""


class Node(Protocol):
    """A stream as its context holds it: described for the fingerprint, told when to forget."""

    def describe(self) -> dict[str, Any]: ...

    def forget(self, batch_time: int) -> None: ...


class QueryableState(Protocol):
    """A keyed state as live queries read it (`service.graph.queryable`)."""

    @property
    def partitions(self) -> int: ...

    def queryable_rdd(self) -> RDD | None:
        """The state's RDD of the latest batch it computed; None when it holds nothing."""
        ...


@runtime_checkable
class StoredState(Protocol):
    """A keyed state on disk as live queries read it: from its partitions' local stores
    (`service.graph.disk_queries`)."""

    @property
    def partitions(self) -> int: ...

    @property
    def version(self) -> int | None:
        """The batch the state is at; None before its first."""
        ...

    def local_store(self, partition: int) -> Any:
        """The partition's `LocalStore`, read-only, or None when this machine lacks it."""
        ...


class GraphContext(Protocol):
    """What a stream needs of the context that holds its graph."""

    sc: Any
    batch_interval_ms: int
    default_partitions: int
    auto_layout: bool
    dead_letters_enabled: bool
    input_counters: Any
    placement: OutputPlacement

    def register(self, stream: Node) -> int: ...

    def add_output(self, output: OutputOperation) -> None: ...

    def configured_sink(self, name: str) -> Sink: ...

    def add_queryable(self, name: str, state: QueryableState | StoredState) -> None: ...
