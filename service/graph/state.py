"""State operators: `update_state_by_key` and `map_with_state` (the paper's `track`).

The state at batch `t` is an RDD hash-partitioned by key into a fixed number of partitions
(with the fixed `PYTHONHASHSEED`, partition `p` holds the same keys on every run and replay),
computed from the state at the previous batch and the batch's input, partition by partition:
the previous state and the batch's values, shuffled into the same partitioning, are unioned
partition by partition (no shuffle of the state) and merged by a plain function of
`service.graph.state_functions`. Only the latest state stays persisted: the one before it is
released once a job has materialized the latest (see `stateful.release_superseded`), and a
checkpoint replaces the latest by its copy read back from the checkpoint store (not persisted:
the next batch reads it once), which cuts the lineage.

Timeouts are measured in batch time: a key is idle since the batch of its last value.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from functools import partial
from typing import Any

from service.graph import state_functions as fn
from service.graph import stateful
from service.graph.base import RDD, BatchStream, GraphContext
from service.graph.plan import BatchPlan
from service.graph.state_spec import StateSpec

Merge = Callable[[int, Iterable[Any]], Iterator[Any]]


class KeyedState(stateful.StatefulComputation):
    """The state records of every batch (see `state_functions`); users see them through
    `service.graph.dstream.StateView`s."""

    def __init__(
        self,
        ctx: GraphContext,
        parent: BatchStream,
        kind: str,
        merge: Merge,
        partitions: int,
        initial: Iterable[tuple[Any, Any]] | None,
    ) -> None:
        super().__init__(ctx, parent, kind)
        self.partitions = partitions
        self.params.update(partitions=partitions, initial=initial is not None)
        self._merge = merge
        self._initial = list(initial) if initial is not None else None
        self._states: list[tuple[int, RDD]] = []
        self._may_have_state = bool(self._initial)
        self._catch_up_times: list[int] = []
        self._catching_up: list[RDD] = []

    def compute(self, plan: BatchPlan) -> RDD:
        if self._catch_up_times:
            # The first batch after recovery's catch-up joins its fold: one pass less over the
            # whole state than folding first and merging this batch after.
            self.catch_up(plan)
            self._fold_caught_up()
            return self._states[-1][1] if self._states else self.ctx.sc.emptyRDD()
        t = plan.batch_time
        self._check_next(t)
        self.decide_empty(t, self.parent.is_empty(plan) and not self._may_have_state)
        inputs = [self._previous(t)] if self._states or self._initial else []
        if not self.parent.is_empty(plan):
            # Tagging keeps the partitioning, so input already hash-partitioned like the state
            # (e.g. a reduce by key with the same partition count) is not shuffled again.
            tagged = self.parent.rdd_at(plan).mapPartitionsWithIndex(
                fn.tag_new_values, preservesPartitioning=True
            )
            inputs.append(tagged.partitionBy(self.partitions))
            self._may_have_state = True
        if not inputs:
            return self.ctx.sc.emptyRDD()
        union = stateful.union_partitioned(self.ctx.sc, inputs)
        merge = partial(self._merge, t)
        merged = stateful.persist(union.mapPartitions(merge, preservesPartitioning=True))
        self._states = [*self._states, (t, merged)]
        return merged

    def catch_up(self, plan: BatchPlan) -> bool:
        """Takes a completed batch in without merging it yet (see `end_catch_up`)."""
        t = plan.batch_time
        self._check_next(t)
        self.decide_empty(t, self.parent.is_empty(plan) and not self._may_have_state)
        if not self.parent.is_empty(plan):
            tag = partial(fn.tag_new_values_at, t)
            rdd = self.parent.rdd_at(plan)
            self._catching_up.append(rdd.mapPartitionsWithIndex(tag, preservesPartitioning=True))
            self._may_have_state = True
        self._catch_up_times.append(t)
        return True

    def end_catch_up(self) -> None:
        """Nothing yet: the batches taken in by `catch_up` are folded with the next batch
        computed (`compute`), or when their state is asked for (`latest`, a checkpoint)."""

    def _fold_caught_up(self) -> None:
        """The state after the batches taken in by `catch_up`, as one RDD: one shuffle of all
        their input and one merge task per partition that folds the batches in order
        (`state_functions.fold_batches`), where computing them one by one would shuffle each
        batch and pass the whole state through the block store once per batch."""
        times, tagged = tuple(self._catch_up_times), self._catching_up
        self._catch_up_times, self._catching_up = [], []
        inputs = [self._previous(times[0])] if times and (self._states or self._initial) else []
        if tagged:
            caught_up = stateful.union_partitioned(self.ctx.sc, tagged)
            inputs.append(caught_up.partitionBy(self.partitions))
        if not inputs:
            return
        fold = partial(fn.fold_batches, self._merge, times)
        union = stateful.union_partitioned(self.ctx.sc, inputs)
        merged = stateful.persist(union.mapPartitions(fold, preservesPartitioning=True))
        self._states = [*self._states, (times[-1], merged)]

    def _check_next(self, t: int) -> None:
        last = self._catch_up_times[-1] if self._catch_up_times else None
        if last is None and self._states:
            last = self._states[-1][0]
        if last is not None and last >= t:
            msg = (
                f"{self.kind}: state of batch {t} asked for after batch {last}; "
                "state advances one batch at a time, in order"
            )
            raise fn.StateError(msg)

    @property
    def latest(self) -> RDD | None:
        """The state RDD of the latest batch computed (or restored), if any."""
        self._fold_caught_up()
        return self._states[-1][1] if self._states else None

    def queryable_rdd(self) -> RDD | None:
        """The state RDD of the latest batch computed, for live queries once that batch has
        completed (`service.graph.queryable`); None when the state holds nothing. Called after
        a batch ran, when no batch taken in by `catch_up` waits to be folded."""
        return self._states[-1][1] if self._states else None

    def _previous(self, t: int) -> RDD:
        if self._states:
            return self._states[-1][1]
        start = partial(fn.initial_entries, t)
        rows = self.ctx.sc.parallelize(self._initial or [], self.partitions)
        return rows.mapPartitions(start).partitionBy(self.partitions)

    def forget(self, batch_time: int) -> None:
        self._states = stateful.release_superseded(self._states)

    def checkpoint_pieces(self, batch_time: int) -> list[stateful.Piece]:
        self._fold_caught_up()
        if not self._states:
            rdd = self._previous(batch_time)
        else:
            rdd = self._states[-1][1].filter(fn.is_state_entry)
        return [stateful.Piece("state", rdd, "state")]

    def restore(self, batch_time: int, pieces: dict[str, RDD]) -> None:
        for _, rdd in self._states:
            stateful.release(rdd)
        restored = stateful.in_partitions(pieces["state"], self.partitions)
        # Not persisted: only the next batch's merge reads it (its result is persisted), and
        # reading the checkpoint's files again costs less than serializing every key into the
        # block store once more.
        self._states = [(batch_time, restored)]
        self._may_have_state = True

    def rescale(self, partitions: int) -> None:
        """From the next batch on, the state lives in `partitions` hash partitions, and so do
        the batches computed from it (docs/architecture.md, "Recovery"). Recovery computes the
        journaled batches in the count that planned them first, since a replayed batch must
        write the same output partitions as its first attempt, then calls this once."""
        if partitions == self.partitions:
            return
        latest = self.latest  # batches taken in by `catch_up` fold in the old partitioning
        self.partitions = partitions
        if latest is None:
            return
        moved = latest.filter(fn.is_state_entry).partitionBy(partitions)
        # The old RDD stays persisted until a job has materialized the moved one (`forget`).
        self._states = [*self._states, (self._states[-1][0], stateful.persist(moved))]


def updated_state(
    ctx: GraphContext,
    parent: BatchStream,
    update_fn: fn.UpdateFunction,
    partitions: int,
    initial: Iterable[tuple[Any, Any]] | None,
    ttl_ms: int | None = None,
) -> KeyedState:
    """`update_state_by_key`'s state: `update_fn(new_values, state) -> state | None` for every
    key with new values or state, every batch; None removes the key, and so does `ttl_ms` of
    batch time without a value."""
    merge = partial(fn.update_state_partition, update_fn, ttl_ms)
    state = KeyedState(ctx, parent, "update_state_by_key", merge, partitions, initial)
    if ttl_ms is not None:
        state.params["ttl_ms"] = ttl_ms
    return state


def mapped_state(
    ctx: GraphContext, parent: BatchStream, spec: StateSpec, partitions: int
) -> KeyedState:
    """`map_with_state`'s state, with the records `spec.function` returns beside it."""
    merge = partial(fn.map_with_state_partition, spec.function, spec.timeout_ms)
    state = KeyedState(ctx, parent, "map_with_state", merge, partitions, spec.initial)
    state.params["timeout_ms"] = spec.timeout_ms
    return state
