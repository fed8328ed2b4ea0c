"""What every stateful stream (windows, state) shares: stepped every batch, checkpointed as data.

A stateful stream's RDD at batch `t` depends on earlier batches, so unlike a stateless stream it
must see every batch in order, whether or not an output needs its rows then:
`step_stateful(ctx, batch)` computes (lazily: no Spark job) each stateful stream's RDD of the
batch before the outputs run. What a stream needs to carry on from batch `t` is a list of
`Piece`s (RDDs with a data-only format) that the driver writes at a checkpoint and hands back
through `restore`, which also cuts the lineage.

Batch identity: `compute`, `rdd_at` and `is_empty` receive a `Batch`, and the stateful classes
read its time only through `batch_time_of`; when the graph passes a batch plan instead of a time,
these two names are the only change here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from service.errors import ConfigError
from service.graph.dstream import RDD, DStream

if TYPE_CHECKING:
    from service.graph.context import StreamingContext

Batch = int


def batch_time_of(batch: Batch) -> int:
    """The batch time (ms) of what `compute` receives."""
    return batch


@dataclass(frozen=True)
class Piece:
    """One RDD a stateful stream needs to carry on after a checkpoint.

    `fmt`: "state" (state records), "pairs" (key-value pairs hash-partitioned by key) or "rows"
    (anything, unpartitioned). See `service.graph.checkpoint_store`.
    """

    name: str
    rdd: RDD
    fmt: str


class StatefulDStream(DStream):
    """Base of window and state streams."""

    _decided: tuple[int, bool] | None = None

    def is_empty(self, batch: Batch) -> bool:
        """Decided when the batch is computed, since computing it moves the stream's history on
        (an incremental window's previous window becomes this one)."""
        self.rdd_at(batch)
        t = batch_time_of(batch)
        return self._decided is None or self._decided != (t, False)

    def decide_empty(self, batch_time: int, empty: bool) -> bool:
        self._decided = (batch_time, empty)
        return empty

    def checkpoint_pieces(self, batch_time: int) -> list[Piece]:
        """What this stream needs, after batch `batch_time`, to compute later batches."""
        raise NotImplementedError

    def restore(self, batch_time: int, pieces: dict[str, RDD]) -> None:
        """Carries on from `pieces` (read back from a checkpoint of `batch_time`), dropping the
        lineage that produced them."""
        raise NotImplementedError

    def state_summary(self) -> dict[str, int]:
        """Figures for metrics (e.g. keys, bytes of the last checkpoint); empty when unknown."""
        return dict(self._summary)

    _summary: dict[str, int] = {}  # replaced per instance by set_summary, never mutated

    def set_summary(self, **figures: int) -> None:
        self._summary = figures

    def drop_rdds(self, batch_time: int) -> None:
        """`forget` without unpersisting: a stateful stream releases what it persisted itself."""
        self._rdds = {t: rdd for t, rdd in self._rdds.items() if t > batch_time}

    def piece_name(self, piece: str) -> str:
        """A piece's name in checkpoint refs: unique in the graph, stable across runs."""
        return f"s{self.node_id}-{self.kind}-{piece}"


def stateful_streams(ctx: StreamingContext) -> list[StatefulDStream]:
    """The graph's stateful streams, parents before children."""
    return [stream for stream in ctx.streams if isinstance(stream, StatefulDStream)]


def step_stateful(ctx: StreamingContext, batch: Batch) -> None:
    """Builds every stateful stream's RDD of `batch` (no job runs), before the outputs run."""
    for stream in stateful_streams(ctx):
        stream.rdd_at(batch)


def persist(rdd: RDD) -> RDD:
    """Keeps `rdd` for later batches; spilled to disk rather than recomputed under pressure."""
    from pyspark import StorageLevel

    return rdd.persist(StorageLevel.MEMORY_AND_DISK)


def release(rdd: RDD | None) -> None:
    if rdd is not None and rdd.is_cached:
        rdd.unpersist(blocking=False)


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
    """A window duration must be a positive multiple of the batch interval."""
    if value_ms <= 0 or value_ms % interval_ms != 0:
        nearest = max(1, round(value_ms / interval_ms)) * interval_ms
        msg = (
            f"{operator}: {name} {value_ms} ms must be a positive multiple of the batch "
            f"interval ({interval_ms} ms); use e.g. {nearest} ms"
        )
        raise ConfigError(msg)
    return value_ms
