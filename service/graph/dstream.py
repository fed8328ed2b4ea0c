"""The DStream graph: a DStream is a function from batch time to an RDD.

This module is wiring only. Each operator returns a new `DStream` whose `compute(t)` applies one RDD
transformation to its parents' RDDs for the same batch time. Operator bodies are plain functions
(see `service.graph.functions`), and every shuffle has a fixed partition count, so the same
journaled input gives the same output partitions on every replay.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from service.graph import functions

if TYPE_CHECKING:
    from service.graph.context import StreamingContext
    from service.graph.state import StateView
    from service.graph.state_spec import StateSpec
    from sinks.base import Sink

RDD = Any  # pyspark.RDD; kept as Any because pyspark's types are not followed (see pyproject).
BatchFunction = Callable[[RDD, int], Any]


class DStream:
    """A discretized stream: one RDD per batch time, computed lazily and remembered briefly."""

    def __init__(self, ctx: StreamingContext, parents: list[DStream], kind: str) -> None:
        self.ctx = ctx
        self.parents = parents
        self.kind = kind
        self.params: dict[str, Any] = {}
        self._rdds: dict[int, RDD] = {}
        self.node_id = ctx.register(self)

    # --- evaluation -----------------------------------------------------------------------

    def compute(self, batch_time: int) -> RDD:
        raise NotImplementedError

    def is_empty(self, batch_time: int) -> bool:
        """True when the batch certainly yields no rows, so its outputs can skip the Spark job."""
        return all(parent.is_empty(batch_time) for parent in self.parents)

    def rdd_at(self, batch_time: int) -> RDD:
        """The RDD of batch `batch_time`, computed once and shared by every consumer."""
        rdd = self._rdds.get(batch_time)
        if rdd is None:
            rdd = self.compute(batch_time)
            self._rdds[batch_time] = rdd
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
        stream = TransformedDStream(self.ctx, [self], kind, lambda rdds, t: function(rdds[0], t))
        # The function may produce rows from nothing, so an empty input cannot skip it.
        stream.empty_has_output = True
        return stream

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

        stream = self._pipe("count", count_rdd)
        stream.empty_has_output = True
        return stream

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
        return self._join(other, "join", num_partitions)

    def left_outer_join(self, other: DStream, num_partitions: int | None = None) -> DStream:
        return self._join(other, "left_outer_join", num_partitions)

    # --- stateful operators (bodies in service.graph.window and service.graph.state) -------
    # Durations are in milliseconds of batch time and multiples of the batch interval.

    def window(self, length_ms: int, slide_ms: int | None = None) -> DStream:
        """Every row of the batches in `(t - length_ms, t]`, at each slide boundary `t`."""
        from service.graph import window as windows

        return windows.window(self, length_ms, slide_ms)

    def count_by_window(self, length_ms: int, slide_ms: int | None = None) -> DStream:
        from service.graph import window as windows

        return windows.count_by_window(self, length_ms, slide_ms)

    def reduce_by_window(
        self,
        function: Callable[[Any, Any], Any],
        inv_function: Callable[[Any, Any], Any] | None = None,
        *,
        length_ms: int,
        slide_ms: int | None = None,
    ) -> DStream:
        from service.graph import window as windows

        return windows.reduce_by_window(
            self, function, inv_function, length_ms=length_ms, slide_ms=slide_ms
        )

    def reduce_by_key_and_window(
        self,
        function: Callable[[Any, Any], Any],
        inv_function: Callable[[Any, Any], Any] | None = None,
        *,
        length_ms: int,
        slide_ms: int | None = None,
        num_partitions: int | None = None,
        filter_fn: Callable[[tuple[Any, Any]], bool] | None = None,
    ) -> DStream:
        """Per key, the reduction over the window; incremental when `inv_function` is given."""
        from service.graph import window as windows

        return windows.reduce_by_key_and_window(
            self,
            function,
            inv_function,
            length_ms=length_ms,
            slide_ms=slide_ms,
            num_partitions=num_partitions,
            filter_fn=filter_fn,
        )

    def count_by_value_and_window(
        self, length_ms: int, slide_ms: int | None = None, num_partitions: int | None = None
    ) -> DStream:
        from service.graph import window as windows

        return windows.count_by_value_and_window(self, length_ms, slide_ms, num_partitions)

    def update_state_by_key(
        self,
        update_fn: Callable[[list[Any], Any], Any],
        num_partitions: int | None = None,
        initial: Iterable[tuple[Any, Any]] | None = None,
    ) -> StateView:
        """`update_fn(new_values, state) -> state | None` per key, every batch (None removes)."""
        from service.graph import state

        return state.update_state_by_key(self, update_fn, num_partitions, initial)

    def map_with_state(self, spec: StateSpec) -> StateView:
        """The records `spec.function` returns per value (and per timed-out key)."""
        from service.graph import state

        return state.map_with_state(self, spec)

    # --- output operations ----------------------------------------------------------------

    def foreach_batch(self, function: BatchFunction, name: str | None = None) -> None:
        """Runs `function(rdd, batch_time)` on the driver for every batch; not exactly-once."""
        from service.graph.outputs import ForeachBatchOutput

        self.ctx.add_output(ForeachBatchOutput(self, function, name or f"foreach{self.node_id}"))

    def write(self, name: str, sink: Sink | None = None) -> None:
        """Writes every batch to `sink` (or the sink configured under `name`) exactly once."""
        from service.graph.outputs import SinkOutput

        self.ctx.add_output(SinkOutput(self, name, sink or self.ctx.configured_sink(name)))

    # --- helpers --------------------------------------------------------------------------

    empty_has_output = False

    def _pipe(self, kind: str, step: Callable[[RDD], RDD]) -> DStream:
        return TransformedDStream(self.ctx, [self], kind, lambda rdds, _t: step(rdds[0]))

    def _partitions(self, requested: int | None) -> int:
        return requested if requested is not None else self.ctx.default_partitions

    def _join(self, other: DStream, kind: str, num_partitions: int | None) -> DStream:
        parts = self._partitions(num_partitions)

        def joined(rdds: list[RDD], _t: int) -> RDD:
            left, right = rdds
            if kind == "join":
                return left.join(right, parts)
            return left.leftOuterJoin(right, parts)

        stream = TransformedDStream(self.ctx, [self, other], kind, joined)
        stream.params["partitions"] = parts
        if kind == "left_outer_join":
            stream.empty_when = lambda t: self.is_empty(t)
        return stream


class TransformedDStream(DStream):
    """A stream computed from its parents' RDDs of the same batch time by one step."""

    def __init__(
        self,
        ctx: StreamingContext,
        parents: list[DStream],
        kind: str,
        step: Callable[[list[RDD], int], RDD],
    ) -> None:
        super().__init__(ctx, parents, kind)
        self._step = step
        self.empty_when: Callable[[int], bool] | None = None

    def compute(self, batch_time: int) -> RDD:
        return self._step([parent.rdd_at(batch_time) for parent in self.parents], batch_time)

    def is_empty(self, batch_time: int) -> bool:
        if self.empty_has_output:
            return False
        if self.empty_when is not None:
            return self.empty_when(batch_time)
        if self.kind == "join":
            return any(parent.is_empty(batch_time) for parent in self.parents)
        return super().is_empty(batch_time)
