"""The DStream graph: a DStream is a function from a batch plan to an RDD.

This module is wiring only. Each operator returns a new `DStream` whose `compute(plan)` applies one
RDD transformation to its parents' RDDs for the same batch. Operator bodies are plain functions
(see `service.graph.functions`), and every shuffle has a fixed partition count, so the same
journaled input gives the same output partitions on every replay.

Whether a batch is certainly empty (so its outputs skip the Spark job) is one method,
`is_empty(plan)`, which each kind of stream overrides where its rule differs.

Window and state operators return a `StatefulDStream`: the stream wraps a computation of
`service.graph.window` or `service.graph.state`, which remembers what later batches need and is
checkpointed by the driver (`service.driver.checkpoints`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import replace
from functools import partial
from typing import Any, NotRequired, TypedDict, Unpack

from service.graph import event_functions, functions, state_functions
from service.graph.base import RDD, BatchFunction, GraphContext
from service.graph.disk_state import DEFAULT_SNAPSHOT_EVERY, DiskKeyedState
from service.graph.event_window import EventTime, EventWindow, event_window_spec
from service.graph.outputs import ForeachBatchOutput, SinkOutput
from service.graph.plan import BatchPlan
from service.graph.state import KeyedState, mapped_state, updated_state
from service.graph.state_spec import StateSpec
from service.graph.stateful import Piece, StatefulComputation
from service.graph.window import KeyFilter, Reduce, ReducedWindow, Window
from sinks.base import Sink

__all__ = [
    "RDD",
    "BatchFunction",
    "DStream",
    "EventWindowOptions",
    "EventWindowView",
    "StateView",
    "StatefulDStream",
    "TransformedDStream",
]

Step = Callable[[list[RDD], int], RDD]


class EventWindowOptions(TypedDict):
    """The keywords of `DStream.reduce_by_key_and_event_window` and
    `DStream.count_by_key_and_event_window`. Left out, `slide_ms` is the length (a tumbling
    window), `allowed_lateness_ms` 0, `late` "drop", `num_partitions` the graph's default and
    `max_skew_ms` `event_functions.DEFAULT_MAX_SKEW_MS`."""

    event_time: EventTime
    length_ms: int
    slide_ms: NotRequired[int | None]
    slack_ms: int
    allowed_lateness_ms: NotRequired[int]
    late: NotRequired[str]
    num_partitions: NotRequired[int | None]
    max_skew_ms: NotRequired[int]


def _check_event_window_keywords(options: EventWindowOptions) -> None:
    """The `TypeError` a call with explicit keywords would raise: options are passed as
    `**options`, which Python itself does not check against `EventWindowOptions`."""
    unknown = sorted(set(options) - set(EventWindowOptions.__annotations__))
    missing = sorted({"event_time", "length_ms", "slack_ms"} - set(options))
    if unknown or missing:
        msg = f"an event window's keywords: unexpected {unknown}, missing {missing}"
        raise TypeError(msg)


class DStream:
    """A discretized stream: one RDD per batch time, computed lazily and remembered briefly."""

    def __init__(self, ctx: GraphContext, parents: list[DStream], kind: str) -> None:
        self.ctx = ctx
        self.parents = parents
        self.children: list[DStream] = []
        self.kind = kind
        self.params: dict[str, Any] = {}
        self._rdds: dict[int, RDD] = {}
        self.own_outputs = 0
        """Outputs declared on this very stream (`write`, `foreach_batch`)."""
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

    def computations_per_batch(self) -> int:
        """How often a batch's outputs would compute this stream's RDD if it were not persisted:
        once per path from it to an output (two outputs, a union or a join of it with itself
        make two). A persisted stateful stream counts once, however many outputs read it."""
        below = sum(child.computations_per_batch() for child in self.children)
        return self.own_outputs + below

    def reads(self, other: DStream) -> bool:
        """Whether `other` is an ancestor of this stream."""
        return any(parent is other or parent.reads(other) for parent in self.parents)

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
        return ShuffledDStream(
            self.ctx,
            [self],
            "reduce_by_key",
            self._shuffle_partitions(num_partitions),
            lambda rdds, parts: rdds[0].reduceByKey(function, parts),
            partial(functions.combine_in_partition, functions.identity, function),
        )

    def combine_by_key(
        self,
        create: Callable[[Any], Any],
        merge_value: Callable[[Any, Any], Any],
        merge_combiners: Callable[[Any, Any], Any],
        num_partitions: int | None = None,
    ) -> DStream:
        return ShuffledDStream(
            self.ctx,
            [self],
            "combine_by_key",
            self._shuffle_partitions(num_partitions),
            lambda rdds, parts: rdds[0].combineByKey(create, merge_value, merge_combiners, parts),
            partial(functions.combine_in_partition, create, merge_value),
        )

    def count_by_value(self, num_partitions: int | None = None) -> DStream:
        return self.map(functions.pair_with_one).reduce_by_key(functions.add, num_partitions)

    def group_by_key(self, num_partitions: int | None = None) -> DStream:
        return ShuffledDStream(
            self.ctx,
            [self],
            "group_by_key",
            self._shuffle_partitions(num_partitions),
            lambda rdds, parts: rdds[0].groupByKey(parts).mapValues(list),
            partial(
                functions.combine_in_partition, functions.singleton_list, functions.append_value
            ),
        )

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
        partitions = self._shuffle_partitions(num_partitions)
        return JoinDStream(self.ctx, self, other, partitions, left_outer=False)

    def left_outer_join(self, other: DStream, num_partitions: int | None = None) -> DStream:
        """Every pair of this stream with the matching values of `other` (None where none)."""
        partitions = self._shuffle_partitions(num_partitions)
        return JoinDStream(self.ctx, self, other, partitions, left_outer=True)

    # --- stateful operators (computations in service.graph.window and service.graph.state) -
    # Durations are in milliseconds of batch time and multiples of the batch interval.

    def window(self, length_ms: int, slide_ms: int | None = None) -> DStream:
        """Every row of the batches in `(t - length_ms, t]`, at each slide boundary `t`."""
        return StatefulDStream(self, Window(self.ctx, self, length_ms, slide_ms))

    def count_by_window(self, length_ms: int, slide_ms: int | None = None) -> DStream:
        """The number of rows in each window (incremental; 0 once rows have left it)."""
        ones = self.map(state_functions.constant_one)
        return ones.reduce_by_window(
            functions.add, state_functions.subtract, length_ms=length_ms, slide_ms=slide_ms
        )

    def reduce_by_window(
        self,
        function: Reduce,
        inv_function: Reduce | None = None,
        *,
        slide_ms: int | None = None,
        length_ms: int,
    ) -> DStream:
        """One value per window: the reduction of every row in it (by one key, on one partition)."""
        keyed = self.map(state_functions.key_by_none)
        reduced = ReducedWindow(
            self.ctx,
            keyed,
            function,
            inv_function,
            length_ms,
            slide_ms,
            1,
            None,
            "reduce_by_window",
        )
        return StatefulDStream(keyed, reduced).map(functions.second)

    def reduce_by_key_and_window(
        self,
        function: Reduce,
        inv_function: Reduce | None = None,
        *,
        length_ms: int,
        slide_ms: int | None = None,
        num_partitions: int | None = None,
        filter_fn: KeyFilter | None = None,
    ) -> DStream:
        """Per key, the reduction over the window; incremental when `inv_function` is given."""
        parts = self._partitions(num_partitions)
        reduced = ReducedWindow(
            self.ctx, self, function, inv_function, length_ms, slide_ms, parts, filter_fn
        )
        return StatefulDStream(self, reduced)

    def count_by_value_and_window(
        self, length_ms: int, slide_ms: int | None = None, num_partitions: int | None = None
    ) -> DStream:
        """`(value, count)` per distinct value in each window; values whose count fell to 0 drop."""
        return self.map(functions.pair_with_one).reduce_by_key_and_window(
            functions.add,
            state_functions.subtract,
            length_ms=length_ms,
            slide_ms=slide_ms,
            num_partitions=num_partitions,
            filter_fn=state_functions.count_is_not_zero,
        )

    def update_state_by_key(
        self,
        update_fn: Callable[[list[Any], Any], Any],
        num_partitions: int | None = None,
        initial: Iterable[tuple[Any, Any]] | None = None,
        ttl_ms: int | None = None,
    ) -> StateView:
        """`update_fn(new_values, state) -> state | None` per key, every batch (None removes).
        The stream is every `(key, state)`, every batch. With `ttl_ms`, a key that received no
        value for that long in batch time (never the wall clock, so a replay drops the same
        keys) is removed without a call to `update_fn`."""
        if ttl_ms is not None and ttl_ms <= 0:
            msg = f"update_state_by_key: ttl_ms must be positive or None, got {ttl_ms}"
            raise ValueError(msg)
        partitions = self._partitions(num_partitions)
        state = updated_state(self.ctx, self, update_fn, partitions, initial, ttl_ms)
        return StateView(StatefulDStream(self, state), "state_pairs", state_functions.state_pairs)

    def update_state_on_disk(
        self,
        update_fn: Callable[[list[Any], Any], Any],
        num_partitions: int | None = None,
        ttl_ms: int | None = None,
        snapshot_every_batches: int = DEFAULT_SNAPSHOT_EVERY,
    ) -> DiskStateStream:
        """A keyed state larger than memory, in a store on the executors' disks that a batch
        reads and writes only where it has values (`service.graph.disk_state`).

        `update_fn(new_values, state) -> state | None` runs only for keys with new values in
        the batch (None removes the key); with `ttl_ms`, a key that got no value for that long
        in batch time is removed without a call. The stream is each batch's changes:
        `(key, state)` per key that got a value, `(key, None)` per key removed. State values
        are the types a checkpoint stores (`service.graph.checkpoint_store`). Each partition
        publishes a whole copy of its store every `snapshot_every_batches` of its batches."""
        state = DiskKeyedState(
            self.ctx,
            self,
            update_fn,
            self._partitions(num_partitions),
            ttl_ms,
            snapshot_every_batches,
        )
        return DiskStateStream(self, state)

    def map_with_state(self, spec: StateSpec) -> StateView:
        """The records `spec.function` returns per value (and per timed-out key);
        `.state_snapshots()` gives the state itself."""
        state = mapped_state(self.ctx, self, spec, self._partitions(spec.num_partitions))
        stream = StatefulDStream(self, state)
        return StateView(stream, "mapped_with_state", state_functions.mapped_records)

    def reduce_by_key_and_event_window(
        self, function: Reduce, **options: Unpack[EventWindowOptions]
    ) -> EventWindowView:
        """Per key and event-time window `[start, end)`, the reduction of the values whose
        `event_time(value)` (ms, or "kafka") falls in it, as `WindowResult`s emitted once the
        watermark (newest event time minus `slack_ms`) reaches `end`, and again with the next
        revision for each batch of records within `allowed_lateness_ms`; later records, and
        records more than `max_skew_ms` ahead of the watermark (which they do not move), are
        dropped and counted (`late="drop"`) or become dead letters (`late="dead_letter"`).
        See `EventWindowOptions` and `service.graph.event_window`."""
        return self._event_window(function, None, "event_window_results", options)

    def count_by_key_and_event_window(
        self, **options: Unpack[EventWindowOptions]
    ) -> EventWindowView:
        """`reduce_by_key_and_event_window` counting the records per key and window."""
        return self._event_window(
            functions.add, state_functions.constant_one, "event_window_counts", options
        )

    def _event_window(
        self,
        function: Reduce,
        lift: Callable[[Any], Any] | None,
        kind: str,
        options: EventWindowOptions,
    ) -> EventWindowView:
        _check_event_window_keywords(options)
        spec = event_window_spec(
            options["event_time"],
            function,
            lift,
            options["length_ms"],
            options.get("slide_ms"),
            options["slack_ms"],
            options.get("allowed_lateness_ms", 0),
            options.get("late", "drop"),
            options.get("max_skew_ms", event_functions.DEFAULT_MAX_SKEW_MS),
        )
        window = EventWindow(self.ctx, self, spec, self._partitions(options.get("num_partitions")))
        return EventWindowView(StatefulDStream(self, window), kind)

    # --- output operations ----------------------------------------------------------------

    def foreach_batch(self, function: BatchFunction, name: str | None = None) -> None:
        """Runs `function(rdd, batch_time)` on the driver for every batch; not exactly-once."""
        self.own_outputs += 1
        self.ctx.add_output(ForeachBatchOutput(self, function, name or f"foreach{self.node_id}"))

    def write(self, name: str, sink: Sink | None = None) -> None:
        """Writes every batch to `sink` (or the sink configured under `name`) exactly once."""
        sink = sink or self.ctx.configured_sink(name)
        self.own_outputs += 1
        self.ctx.add_output(SinkOutput(self, name, sink, self.ctx.placement))

    # --- helpers --------------------------------------------------------------------------

    def _pipe(self, kind: str, step: Callable[[RDD], RDD]) -> DStream:
        return TransformedDStream(self.ctx, [self], kind, lambda rdds, _t: step(rdds[0]))

    def _partitions(self, requested: int | None) -> int:
        return requested if requested is not None else self.ctx.default_partitions

    def _shuffle_partitions(self, requested: int | None) -> int | None:
        """A stateless shuffle's partitions; None: each batch's layout decides."""
        if requested is None and self.ctx.auto_layout:
            return None
        return self._partitions(requested)


class TransformedDStream(DStream):
    """A stream computed from its parents' RDDs of the same batch by one step."""

    def __init__(self, ctx: GraphContext, parents: list[DStream], kind: str, step: Step) -> None:
        super().__init__(ctx, parents, kind)
        self._step = step

    def compute(self, plan: BatchPlan) -> RDD:
        rdds = [parent.rdd_at(plan) for parent in self.parents]
        return self._step(rdds, plan.batch_time)


Shuffle = Callable[[list[RDD], int], RDD]


class ShuffledDStream(DStream):
    """A stateless shuffle into `partitions`, or, where the job left it unsized (None), into
    as many as the batch's journaled layout says (`service.graph.layout`).

    A layout of one task over one input partition needs no shuffle: `in_partition` (a
    key-wise combine of one partition's rows, for one parent) computes the same rows without
    the shuffle's stage, which costs a small batch about a third of its Spark job. The choice
    depends on the journaled layout and the plan's input partitions alone, so a replay makes it
    the same way."""

    def __init__(
        self,
        ctx: GraphContext,
        parents: list[DStream],
        kind: str,
        partitions: int | None,
        shuffle: Shuffle,
        in_partition: Callable[[Iterable[Any]], Iterable[Any]] | None = None,
    ) -> None:
        super().__init__(ctx, parents, kind)
        self.partitions = partitions
        self._shuffle = shuffle
        self._in_partition = in_partition
        self.params["partitions"] = "auto" if partitions is None else partitions

    def partitions_at(self, plan: BatchPlan) -> int:
        if self.partitions is not None:
            return self.partitions
        return plan.layout.tasks if plan.layout is not None else self.ctx.default_partitions

    def compute(self, plan: BatchPlan) -> RDD:
        rdds = [parent.rdd_at(plan) for parent in self.parents]
        partitions = self.partitions_at(plan)
        if self._needs_no_shuffle(partitions, rdds):
            assert self._in_partition is not None  # noqa: S101 - checked by _needs_no_shuffle
            return rdds[0].mapPartitions(self._in_partition)
        return self._shuffle(rdds, partitions)

    def _needs_no_shuffle(self, partitions: int, rdds: list[RDD]) -> bool:
        if self._in_partition is None or self.partitions is not None or partitions != 1:
            return False
        return len(rdds) == 1 and rdds[0].getNumPartitions() == 1


class GeneratingDStream(TransformedDStream):
    """A step that may produce rows from an empty input (`transform`, `count`): never skipped."""

    def is_empty(self, plan: BatchPlan) -> bool:
        return False


class JoinDStream(ShuffledDStream):
    """A join of `left` and `right` by key. An inner join is empty as soon as either side is,
    since every row needs a match; a left outer join keeps every left row, so it is empty
    exactly when the left is."""

    def __init__(
        self,
        ctx: GraphContext,
        left: DStream,
        right: DStream,
        partitions: int | None,
        *,
        left_outer: bool,
    ) -> None:
        kind, shuffle = ("left_outer_join", _left_join) if left_outer else ("join", _join)
        super().__init__(ctx, [left, right], kind, partitions, shuffle)
        self.left_outer = left_outer

    def is_empty(self, plan: BatchPlan) -> bool:
        needed = self.parents[:1] if self.left_outer else self.parents
        return any(parent.is_empty(plan) for parent in needed)


def _join(rdds: list[RDD], partitions: int) -> RDD:
    left, right = rdds
    return left.join(right, partitions)


def _left_join(rdds: list[RDD], partitions: int) -> RDD:
    left, right = rdds
    return left.leftOuterJoin(right, partitions)


class StatefulDStream(DStream):
    """A stream whose batch depends on earlier batches: a window or a keyed state.

    Its `StatefulComputation` does the work and remembers (and persists) what later batches
    need; the stream names the computation's checkpoint pieces uniquely in the graph.
    """

    def __init__(self, parent: DStream, computation: StatefulComputation) -> None:
        super().__init__(parent.ctx, [parent], computation.kind)
        self.computation = computation
        self.params.update(computation.params)

    def compute(self, plan: BatchPlan) -> RDD:
        return self.computation.compute(plan)

    def is_empty(self, plan: BatchPlan) -> bool:
        self.rdd_at(plan)
        return self.computation.empty_at(plan.batch_time)

    def computations_per_batch(self) -> int:
        # Its computation persists what it makes of the parent's RDD: one computation of the
        # parent feeds every reader, and it is made even when no output reads it now.
        return 1

    def forget(self, batch_time: int) -> None:
        # Not DStream.forget: the RDDs handed out are the computation's, which releases what
        # it persisted once no later batch needs it.
        self._rdds = {t: rdd for t, rdd in self._rdds.items() if t > batch_time}
        self.computation.forget(batch_time)

    def catch_up(self, plan: BatchPlan, fold: bool) -> None:
        """Steps through a completed batch during recovery; with `fold`, lets the computation
        fold it with the next ones (`StatefulComputation.catch_up`) if it can."""
        if not (fold and self.computation.catch_up(plan)):
            self.rdd_at(plan)

    def end_catch_up(self) -> None:
        self.computation.end_catch_up()

    @property
    def piece_prefix(self) -> str:
        """What this stream's checkpoint piece names start with: unique in the graph and
        stable across runs of the same graph."""
        return f"s{self.node_id}-{self.kind}-"

    def checkpoint_pieces(self, batch_time: int) -> list[Piece]:
        pieces = self.computation.checkpoint_pieces(batch_time)
        return [replace(piece, name=self.piece_prefix + piece.name) for piece in pieces]

    def restore(self, batch_time: int, pieces: dict[str, RDD]) -> None:
        """Carries on from the pieces of a checkpoint (all streams' pieces, keyed by name)."""
        prefix = self.piece_prefix
        mine = {n.removeprefix(prefix): r for n, r in pieces.items() if n.startswith(prefix)}
        self.computation.restore(batch_time, mine)


class DiskStateStream(StatefulDStream):
    """The changes of a keyed state on disk (`DStream.update_state_on_disk`)."""

    def __init__(self, parent: DStream, computation: DiskKeyedState) -> None:
        super().__init__(parent, computation)
        self.disk_state = computation

    def queryable(self, name: str) -> DiskStateStream:
        """Lets the driver's HTTP endpoint answer a key's state as of the last completed batch,
        read from the partition's local store (`service.graph.queryable`): in local mode, or
        where the stores' folder is shared with the driver."""
        self.ctx.add_queryable(name, self.disk_state)
        self.disk_state.queried = True
        return self


class StateView(TransformedDStream):
    """A user-facing view of a keyed state stream: its `(key, state)` pairs, or the records a
    `map_with_state` function returned."""

    def __init__(
        self, state: StatefulDStream, kind: str, select: Callable[[Iterable[Any]], Iterator[Any]]
    ) -> None:
        super().__init__(state.ctx, [state], kind, partial(_select_step, select))
        self.state = state

    def state_snapshots(self) -> StateView:
        """`(key, state)` for every key with state, every batch."""
        return StateView(self.state, "state_snapshots", state_functions.state_pairs)

    def changes(self) -> StateView:
        """`(key, state)` for the keys whose state appeared or changed in this batch."""
        return StateView(self.state, "state_changes", state_functions.changed_pairs)

    def queryable(self, name: str) -> StateView:
        """Lets the driver's HTTP endpoint answer this keyed state's value of a key, as of the
        last completed batch: `GET /state/<name>/<key>` (`service.graph.queryable`). Off unless
        asked for; not part of the graph's fingerprint (it changes no output)."""
        computation = self.state.computation
        if not isinstance(computation, KeyedState):  # pragma: no cover - views wrap keyed states
            msg = f"queryable({name!r}): only a keyed state answers queries"
            raise TypeError(msg)
        self.ctx.add_queryable(name, computation)
        return self


def _select_step(
    select: Callable[[Iterable[Any]], Iterator[Any]], rdds: list[RDD], _batch_time: int
) -> RDD:
    return rdds[0].mapPartitions(select, preservesPartitioning=True)


class EventWindowView(TransformedDStream):
    """The `WindowResult`s an event-time window emits in each batch (see
    `service.graph.event_window`), with its late records and a Kafka-keyed form beside."""

    def __init__(self, window: StatefulDStream, kind: str) -> None:
        step = partial(_emitted_step, event_functions.OUT)
        super().__init__(window.ctx, [window], kind, step)
        self.windowed = window
        self.params["late"] = window.params.get("late")

    def late_records(self) -> DStream:
        """The `LateRecord`s of `late="dead_letter"` (too late for every window they belong
        to), each in the batch that read it; the wiring sends them to the dead-letter topic."""
        step = partial(_emitted_step, event_functions.LATE)
        return TransformedDStream(self.ctx, [self.windowed], "event_window_late", step)

    def keyed_by_window(self) -> DStream:
        """`("<key>@<start_ms>", {...})` pairs: a Kafka sink keys each window's revisions alike,
        so a compacted topic keeps the latest revision of every window."""
        return self.map(event_functions.keyed_by_window)


def _emitted_step(tag: int, rdds: list[RDD], batch_time: int) -> RDD:
    return rdds[0].mapPartitions(partial(event_functions.emitted_in, batch_time, tag))
