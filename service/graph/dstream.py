"""The DStream graph: a DStream is a function from a batch plan to an RDD.

This module is wiring only. Each operator returns a new `DStream` whose `compute(plan)` applies one
RDD transformation to its parents' RDDs for the same batch. Operator bodies are plain functions
(see `service.graph.functions`), and every shuffle has a fixed partition count, so the same
journaled input gives the same output partitions on every replay.

Whether a batch is certainly empty (so its outputs skip the Spark job) is one method,
`is_empty(plan)`, which each kind of stream overrides where its rule differs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from functools import partial
from typing import Any

from service.graph import functions
from service.graph.base import RDD, BatchFunction, GraphContext
from service.graph.outputs import ForeachBatchOutput, SinkOutput
from service.graph.plan import BatchPlan
from sinks.base import Sink

__all__ = ["RDD", "BatchFunction", "DStream", "TransformedDStream"]

Step = Callable[[list[RDD], int], RDD]


class DStream:
    """A discretized stream: one RDD per batch time, computed lazily and remembered briefly."""

    def __init__(self, ctx: GraphContext, parents: list[DStream], kind: str) -> None:
        self.ctx = ctx
        self.parents = parents
        self.children: list[DStream] = []
        self.kind = kind
        self.params: dict[str, Any] = {}
        self._rdds: dict[int, RDD] = {}
        for parent in parents:
            parent.children.append(self)
        self.node_id = ctx.register(self)

    # --- evaluation -----------------------------------------------------------------------

    def compute(self, plan: BatchPlan) -> RDD:
        """This stream's RDD for the batch `plan` describes (its time is `plan.batch_time`)."""
        raise NotImplementedError

    def is_empty(self, plan: BatchPlan) -> bool:
        """True when the batch certainly yields no rows, so its outputs can skip the Spark job.

        Decided from the plan alone, never from data, so a replay decides the same. By default
        a stream is empty when all its parents are.
        """
        return all(parent.is_empty(plan) for parent in self.parents)

    def rdd_at(self, plan: BatchPlan) -> RDD:
        """The RDD of batch `plan.batch_time`, computed once and shared by every consumer."""
        rdd = self._rdds.get(plan.batch_time)
        if rdd is None:
            rdd = self.compute(plan)
            self._rdds[plan.batch_time] = rdd
        return rdd

    def forget(self, batch_time: int) -> None:
        """Drops remembered RDDs up to and including `batch_time`, releasing cached ones."""
        for t in [t for t in self._rdds if t <= batch_time]:
            rdd = self._rdds.pop(t)
            if rdd.is_cached:
                rdd.unpersist(blocking=False)

    def describe(self) -> dict[str, Any]:
        """What the graph fingerprint hashes: kind, parameters that shape output, parents."""
        return {
            "id": self.node_id,
            "kind": self.kind,
            "params": self.params,
            "parents": [parent.node_id for parent in self.parents],
        }

    # --- stateless operators --------------------------------------------------------------

    def transform(self, function: BatchFunction, kind: str = "transform") -> DStream:
        """`function(rdd, batch_time) -> rdd`: any RDD-to-RDD step; the batch time comes as data."""
        return GeneratingDStream(self.ctx, [self], kind, lambda rdds, t: function(rdds[0], t))

    def map(self, function: Callable[[Any], Any]) -> DStream:
        return self._pipe("map", lambda rdd: rdd.map(function))

    def flat_map(self, function: Callable[[Any], Iterable[Any]]) -> DStream:
        return self._pipe("flat_map", lambda rdd: rdd.flatMap(function))

    def filter(self, predicate: Callable[[Any], bool]) -> DStream:
        return self._pipe("filter", lambda rdd: rdd.filter(predicate))

    def map_partitions(self, function: Callable[[Iterable[Any]], Iterable[Any]]) -> DStream:
        return self._pipe("map_partitions", lambda rdd: rdd.mapPartitions(function))

    def map_values(self, function: Callable[[Any], Any]) -> DStream:
        return self._pipe("map_values", lambda rdd: rdd.mapValues(function))

    def flat_map_values(self, function: Callable[[Any], Iterable[Any]]) -> DStream:
        return self._pipe("flat_map_values", lambda rdd: rdd.flatMapValues(function))

    def reduce_by_key(
        self, function: Callable[[Any, Any], Any], num_partitions: int | None = None
    ) -> DStream:
        """Combines values per key, map-side first, into a fixed number of partitions."""
        parts = self._partitions(num_partitions)
        stream = self._pipe("reduce_by_key", lambda rdd: rdd.reduceByKey(function, parts))
        stream.params["partitions"] = parts
        return stream

    def combine_by_key(
        self,
        create: Callable[[Any], Any],
        merge_value: Callable[[Any, Any], Any],
        merge_combiners: Callable[[Any, Any], Any],
        num_partitions: int | None = None,
    ) -> DStream:
        parts = self._partitions(num_partitions)
        stream = self._pipe(
            "combine_by_key",
            lambda rdd: rdd.combineByKey(create, merge_value, merge_combiners, parts),
        )
        stream.params["partitions"] = parts
        return stream

    def count_by_value(self, num_partitions: int | None = None) -> DStream:
        return self.map(functions.pair_with_one).reduce_by_key(functions.add, num_partitions)

    def group_by_key(self, num_partitions: int | None = None) -> DStream:
        parts = self._partitions(num_partitions)
        stream = self._pipe("group_by_key", lambda rdd: rdd.groupByKey(parts).mapValues(list))
        stream.params["partitions"] = parts
        return stream

    def count(self) -> DStream:
        """A stream of one element per batch: the number of rows in it (0 for an empty batch)."""

        def count_rdd(rdd: RDD) -> RDD:
            zero = rdd.context.parallelize([(None, 0)], 1)
            per_partition = rdd.mapPartitions(functions.count_iterator)
            return per_partition.union(zero).reduceByKey(functions.add, 1).map(functions.second)

        return GeneratingDStream(self.ctx, [self], "count", lambda rdds, _t: count_rdd(rdds[0]))

    def coalesce(self, num_partitions: int) -> DStream:
        """Merges partitions without a shuffle (in partition order, so replays match)."""
        stream = self._pipe("coalesce", lambda rdd: rdd.coalesce(num_partitions))
        stream.params["partitions"] = num_partitions
        return stream

    def repartition(self, num_partitions: int) -> DStream:
        """Spreads rows over `num_partitions` by their position, the same way on every replay."""

        def spread(rdd: RDD) -> RDD:
            keyed = rdd.mapPartitionsWithIndex(functions.key_by_position)
            return keyed.partitionBy(num_partitions).map(functions.second)

        stream = self._pipe("repartition", spread)
        stream.params["partitions"] = num_partitions
        return stream

    def union(self, *others: DStream) -> DStream:
        streams = [self, *others]
        return TransformedDStream(
            self.ctx, streams, "union", lambda rdds, _t: self.ctx.sc.union(list(rdds))
        )

    def join(self, other: DStream, num_partitions: int | None = None) -> DStream:
        """Inner join of two pair streams, batch by batch."""
        parts = self._partitions(num_partitions)
        return InnerJoinDStream(self.ctx, self, other, parts)

    def left_outer_join(self, other: DStream, num_partitions: int | None = None) -> DStream:
        """Every pair of this stream with the matching values of `other` (None where none)."""
        parts = self._partitions(num_partitions)
        return LeftOuterJoinDStream(self.ctx, self, other, parts)

    # --- output operations ----------------------------------------------------------------

    def foreach_batch(self, function: BatchFunction, name: str | None = None) -> None:
        """Runs `function(rdd, batch_time)` on the driver for every batch; not exactly-once."""
        self.ctx.add_output(ForeachBatchOutput(self, function, name or f"foreach{self.node_id}"))

    def write(self, name: str, sink: Sink | None = None) -> None:
        """Writes every batch to `sink` (or the sink configured under `name`) exactly once."""
        sink = sink or self.ctx.configured_sink(name)
        self.ctx.add_output(SinkOutput(self, name, sink, self.ctx.placement))

    # --- helpers --------------------------------------------------------------------------

    def _pipe(self, kind: str, step: Callable[[RDD], RDD]) -> DStream:
        return TransformedDStream(self.ctx, [self], kind, lambda rdds, _t: step(rdds[0]))

    def _partitions(self, requested: int | None) -> int:
        return requested if requested is not None else self.ctx.default_partitions


class TransformedDStream(DStream):
    """A stream computed from its parents' RDDs of the same batch by one step."""

    def __init__(self, ctx: GraphContext, parents: list[DStream], kind: str, step: Step) -> None:
        super().__init__(ctx, parents, kind)
        self._step = step

    def compute(self, plan: BatchPlan) -> RDD:
        rdds = [parent.rdd_at(plan) for parent in self.parents]
        return self._step(rdds, plan.batch_time)


class GeneratingDStream(TransformedDStream):
    """A step that may produce rows from an empty input (`transform`, `count`): never skipped."""

    def is_empty(self, plan: BatchPlan) -> bool:
        return False


class InnerJoinDStream(TransformedDStream):
    """An inner join: empty as soon as either side is, since every row needs a match."""

    def __init__(self, ctx: GraphContext, left: DStream, right: DStream, partitions: int) -> None:
        super().__init__(ctx, [left, right], "join", partial(_join, partitions))
        self.params["partitions"] = partitions

    def is_empty(self, plan: BatchPlan) -> bool:
        return any(parent.is_empty(plan) for parent in self.parents)


class LeftOuterJoinDStream(TransformedDStream):
    """A left outer join: every left row appears, so it is empty exactly when the left is."""

    def __init__(self, ctx: GraphContext, left: DStream, right: DStream, partitions: int) -> None:
        super().__init__(ctx, [left, right], "left_outer_join", partial(_left_join, partitions))
        self.params["partitions"] = partitions

    def is_empty(self, plan: BatchPlan) -> bool:
        return self.parents[0].is_empty(plan)


def _join(partitions: int, rdds: list[RDD], _batch_time: int) -> RDD:
    left, right = rdds
    return left.join(right, partitions)


def _left_join(partitions: int, rdds: list[RDD], _batch_time: int) -> RDD:
    left, right = rdds
    return left.leftOuterJoin(right, partitions)
