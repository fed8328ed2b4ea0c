"""What every stateful computation (windows, state) shares: stepped every batch, checkpointed as
data.

A stateful stream's RDD at batch `t` depends on earlier batches, so unlike a stateless stream it
must see every batch in order, whether or not an output needs its rows then: the lifecycle asks
each stateful stream for its RDD of the batch (lazily: no Spark job) before the outputs run.
What a stream needs to carry on from batch `t` is a list of `Piece`s (RDDs with a data-only
format) that the driver writes at a checkpoint and hands back through `restore`, which also cuts
the lineage.

The computations here know their parent only as a `BatchStream` and their context only as a
`GraphContext`; `service.graph.dstream.StatefulDStream` wraps one into a DStream, so this module
and the operators built on it (`window`, `state`) sit below `dstream` in the graph's imports.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Any

from service.errors import ConfigError
from service.graph.base import RDD, BatchStream, GraphContext
from service.graph.plan import BatchPlan


@dataclass(frozen=True)
class Piece:
    """One RDD a stateful computation needs to carry on after a checkpoint.

    `name` is unique within the computation (its stream prefixes it to make it unique in the
    graph). `fmt`: "state" (state records), "pairs" (key-value pairs hash-partitioned by key) or
    "rows" (anything, unpartitioned). See `service.graph.checkpoint_store`.
    """

    name: str
    rdd: RDD
    fmt: str


class StatefulComputation:
    """Base of the window and state computations: one RDD per batch, computed in batch order
    from the parent's RDD of the batch and what the computation remembers of earlier ones."""

    def __init__(self, ctx: GraphContext, parent: BatchStream, kind: str) -> None:
        self.ctx = ctx
        self.parent = parent
        self.kind = kind
        self.params: dict[str, Any] = {}
        self._decided: tuple[int, bool] | None = None
        self._summary: dict[str, int] = {}

    def compute(self, plan: BatchPlan) -> RDD:
        """The RDD of batch `plan.batch_time`; called once per batch, in batch order."""
        raise NotImplementedError

    def empty_at(self, batch_time: int) -> bool:
        """Whether the RDD computed for `batch_time` certainly has no rows. Decided when the
        batch is computed, since computing it moves the history on (an incremental window's
        previous window becomes this one)."""
        return self._decided != (batch_time, False)

    def decide_empty(self, batch_time: int, empty: bool) -> bool:
        self._decided = (batch_time, empty)
        return empty

    def forget(self, batch_time: int) -> None:
        """Releases what no batch after `batch_time` needs."""
        raise NotImplementedError

    def catch_up(self, plan: BatchPlan) -> bool:
        """Recovery, when no other stateful stream reads this one: takes a completed batch in
        without building its RDD, to fold it with the following ones in `end_catch_up`. False
        when the computation cannot (the caller then computes the batch as usual)."""
        return False

    def end_catch_up(self) -> None:
        """Ends a recovery's catch-up. A computation may fold the batches it took in now, or
        with the next batch it computes (a keyed state does); no Spark job runs either way."""

    def checkpoint_pieces(self, batch_time: int) -> list[Piece]:
        """What this computation needs, after batch `batch_time`, to compute later batches."""
        raise NotImplementedError

    def restore(self, batch_time: int, pieces: dict[str, RDD]) -> None:
        """Carries on from `pieces` (read back from a checkpoint of `batch_time`, keyed by
        `Piece.name`), dropping the lineage that produced them."""
        raise NotImplementedError

    def state_summary(self) -> dict[str, int]:
        """Figures for metrics (e.g. keys, bytes of the last checkpoint); empty when unknown."""
        return dict(self._summary)

    def set_summary(self, **figures: int) -> None:
        self._summary = figures

    def summarise(self, keys: int, size: int) -> None:
        """Takes the figures of the checkpoint just written or restored: the keys of its state
        pieces and its bytes."""
        self.set_summary(keys=keys, bytes=size)


def persist(rdd: RDD) -> RDD:
    """Keeps `rdd` for later batches; spilled to disk rather than recomputed under pressure."""
    from pyspark import StorageLevel

    return rdd.persist(StorageLevel.MEMORY_AND_DISK)


def in_partitions(rdd: RDD, partitions: int) -> RDD:
    """`rdd` (key-value pairs) hash-partitioned into `partitions`: as it is, or moved once when
    it was written in another count (a checkpoint from before a rescale, see
    `service.driver.rescale`)."""
    return rdd if rdd.getNumPartitions() == partitions else rdd.partitionBy(partitions)


def release(rdd: RDD | None) -> None:
    if rdd is not None and rdd.is_cached:
        rdd.unpersist(blocking=False)


def is_materialized(rdd: RDD) -> bool:
    """Whether Spark holds every partition of the persisted `rdd`, i.e. a job has computed it.

    Asks the driver's block manager master, to which each task reports the blocks it stored
    before it ends. pyspark has no public call for this (its status tracker reports RDD storage
    only as listener events arrive, which may lag a job's end).
    """
    master, block_id = _block_lookup(rdd.context)
    rdd_id = rdd.id()
    return all(
        not master.getLocations(block_id(rdd_id, p)).isEmpty()
        for p in range(rdd.getNumPartitions())
    )


_BLOCK_LOOKUPS: weakref.WeakKeyDictionary[Any, tuple[Any, Any]] = weakref.WeakKeyDictionary()


def _block_lookup(sc: Any) -> tuple[Any, Any]:
    """The JVM's block manager master and `RDDBlockId` class, looked up once per context (each
    step of a JVM lookup is a round trip to the JVM)."""
    found = _BLOCK_LOOKUPS.get(sc)
    if found is None:
        jvm = sc._jvm  # noqa: SLF001 - pyspark's handle on the JVM; no public equivalent
        master = jvm.org.apache.spark.SparkEnv.get().blockManager().master()
        found = (master, jvm.org.apache.spark.storage.RDDBlockId)
        _BLOCK_LOOKUPS[sc] = found
    return found


def release_superseded(chain: list[tuple[int, RDD]]) -> list[tuple[int, RDD]]:
    """Of a chain of persisted RDDs (oldest first, each computed from the one before), releases
    all but the newest once a job has materialized the newest: nothing will read them again.

    Until then the older ones stay: computing the newest reads its predecessor, and releasing a
    predecessor first would make Spark recompute the whole chain back to the last checkpoint.
    """
    if len(chain) < 2 or not is_materialized(chain[-1][1]):
        return chain
    for _, rdd in chain[:-1]:
        release(rdd)
    return chain[-1:]


def union_partitioned(sc: Any, rdds: list[RDD]) -> RDD:
    """`sc.union` that keeps the common hash partitioning of `rdds` (Spark already unions them
    partition by partition; pyspark only forgets to say so), so a following reduce by key
    needs no shuffle."""
    result = rdds[0] if len(rdds) == 1 else sc.union(rdds)
    first = rdds[0].partitioner
    if (
        len(rdds) > 1
        and first is not None
        and all(rdd.partitioner == first for rdd in rdds)
        and result.getNumPartitions() == rdds[0].getNumPartitions()
    ):
        result.partitioner = first
    return result


def check_duration(operator: str, name: str, value_ms: int, interval_ms: int) -> int:
    """A window duration must be a positive multiple of the batch interval.

    >>> check_duration("window", "length_ms", 3000, 1000)
    3000
    >>> check_duration("window", "length_ms", 2500, 1000)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    service.errors.ConfigError: window: length_ms 2500 ms must be a positive multiple ... 2000 ms
    """
    if value_ms <= 0 or value_ms % interval_ms != 0:
        nearest = max(1, round(value_ms / interval_ms)) * interval_ms
        msg = (
            f"{operator}: {name} {value_ms} ms must be a positive multiple of the batch "
            f"interval ({interval_ms} ms); use e.g. {nearest} ms"
        )
        raise ConfigError(msg)
    return value_ms
