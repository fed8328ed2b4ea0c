"""The sink contract: idempotent writes keyed by `BatchKey`, and the driver's commit.

A `Sink` has five methods and two attributes. A batch's output is written in three steps:

1. On the driver, once at start-up: ``sink.setup(app, output)`` creates what the sink writes to.
2. Task `p` of batch `t` calls ``sink.write(BatchKey(app, output, t, p), rows)``: on an executor,
   or on the driver, after collecting the partition, when ``sink.writes_on_driver`` is true (for
   sinks whose state lives in the driver process: the console, the in-memory test sink; the Kafka
   sink in local mode). There, ``sink.writes_in_parallel`` lets the driver write a batch's
   partitions side by side, one thread each. The write
   is idempotent on the key and atomic with the sink's own marker for that key: either the marker
   and all rows are committed, or neither is. A key already committed is skipped.
3. When every task has finished, the driver calls ``sink.commit(app, output, t, partitions)``;
   idempotent too. Only then does the driver journal the batch as completed.

Before any of it, the driver asks ``sink.kafka_needs(app, output)`` what the sink needs of the
Kafka cluster (`KafkaNeeds`: the topics it writes and the access each needs, its transactional
ids, whether it reads the brokers' configuration), for its replication and ACL checks; a sink that
writes elsewhere needs nothing (`NO_KAFKA`).

At shutdown the driver calls ``sink.close()``, which releases the clients and connections the
sink opened in the driver process. It is idempotent, and a sink used after it opens new ones.

Sinks are pickled to executors, so they hold configuration only; connections are opened lazily on
the executor and cached per process.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from connectors.json_fields import JsonFields


@dataclass(frozen=True, order=True)
class BatchKey(JsonFields):
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


@dataclass(frozen=True)
class KafkaTopic:
    """A Kafka topic a sink writes, as the driver's start-up checks see it."""

    name: str
    role: str
    """What the topic is to the sink: output, markers, dead-letters (a metric label)."""
    operations: tuple[str, ...]
    """ACL operations the sink needs on it (Kafka's AclOperation names: WRITE, READ)."""
    replication_factor: int
    """The replication factor `setup` creates the topic with when it is missing."""


@dataclass(frozen=True)
class KafkaNeeds:
    """What a sink needs of the Kafka cluster, asked by the driver before it starts anything
    (docs/architecture.md, "Clear failures"). The default needs nothing."""

    topics: tuple[KafkaTopic, ...] = ()
    transactional_id_prefix: str | None = None
    """Every transactional id the sink's producers use starts with this."""
    reads_broker_configs: bool = False
    """`setup` reads the brokers' configuration (DescribeConfigs on the cluster)."""


NO_KAFKA = KafkaNeeds()
"""What a sink that writes no Kafka topic needs of Kafka."""


@runtime_checkable
class Sink(Protocol):
    """A destination that commits each `BatchKey` exactly once (see the module docstring)."""

    @property
    def writes_on_driver(self) -> bool:
        """True: `write` runs in the driver process on collected rows; False: on executors."""
        ...

    @property
    def writes_in_parallel(self) -> bool:
        """When the driver writes: True if a batch's partitions may be written at once, one
        thread each (each partition's write must then hold clients of its own)."""
        ...

    def kafka_needs(self, app: str, output: str) -> KafkaNeeds:
        """What writing `output` needs of the Kafka cluster (`NO_KAFKA` for other sinks)."""

    def setup(self, app: str, output: str) -> None:
        """Driver-side, once at start-up: create tables/topics/folders, check limits."""

    def write(self, key: BatchKey, rows: Iterable[Any]) -> WriteResult:
        """Commit `rows` under `key` unless `key` is already committed."""

    def prepare_tasks(self, app: str, output: str, tasks: int) -> None:
        """Driver-side, before every write job that runs: make ready for tasks
        ``0 .. tasks - 1``. The number of tasks may change from batch to batch (a map-only job
        over a topic whose partitions grow); it is a function of the batch's journaled plan, so
        a replay has the same number. Idempotent, and cheap once ready for that many."""

    def commit(self, app: str, output: str, batch_time: int, partitions: int) -> None:
        """Driver-side: check or mark batch `batch_time` complete for this output. Idempotent."""

    def forget_before(self, app: str, output: str, batch_time: int) -> None:
        """Driver-side: no batch before `batch_time` can be written again (the journal has
        forgotten them), so what the sink keeps only to recognise them (markers) may go."""

    def close(self) -> None:
        """Driver-side, at shutdown: release this process's clients. Idempotent."""


@runtime_checkable
class WaitsOutOutages(Protocol):
    """A sink whose server may be down for a while (docs/architecture.md, "Faults").

    When a batch's `setup`, write job or `commit` fails while `unreachable()` gives a reason,
    the driver waits for the server, with backoff, for up to `outage_limit_s` seconds, and then
    runs the same step again: writes are idempotent, so what was committed before is skipped.
    """

    @property
    def outage_limit_s(self) -> float:
        """How long an outage may last before the service stops (exit 5)."""
        ...

    def unreachable(self) -> str | None:
        """Driver-side: why the server cannot be used now, or None when it can."""
        ...

    def outage_in(self, error: BaseException) -> str | None:
        """Why `error` (a failed step's) shows that the server did not answer during the step,
        or None. The server may answer again by the time `unreachable()` is asked: an outage
        that ends while a step is failing is waited out all the same, not taken for a fault."""
        ...


def error_chain(error: BaseException) -> Iterator[BaseException]:
    """`error`, then each exception it was raised from or while handling, newest first."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


class WithoutKafka:
    """The members of `Sink` that a destination other than Kafka has nothing to do in: it needs
    nothing of the Kafka cluster, takes any number of tasks as it is, and keeps no per-batch
    marker to forget. Subclasses override what they do have (`setup`, `forget_before`)."""

    def kafka_needs(self, app: str, output: str) -> KafkaNeeds:
        """Nothing: it writes no Kafka topic."""
        return NO_KAFKA

    def setup(self, app: str, output: str) -> None:
        """Nothing to create."""

    def prepare_tasks(self, app: str, output: str, tasks: int) -> None:
        """Nothing: any number of tasks writes here as it is."""

    def forget_before(self, app: str, output: str, batch_time: int) -> None:
        """Nothing: it keeps no marker per batch beside the batch itself."""
