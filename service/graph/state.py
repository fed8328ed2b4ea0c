"""State operators: `update_state_by_key` and `map_with_state` (the paper's `track`).

The state at batch `t` is an RDD hash-partitioned by key into a fixed number of partitions
(with the fixed `PYTHONHASHSEED`, partition `p` holds the same keys on every run and replay),
computed from the state at the previous batch and the batch's input, partition by partition:
the previous state and the batch's values, shuffled into the same partitioning, are unioned
partition by partition (no shuffle of the state) and merged by a plain function of
`service.graph.state_functions`. The state of the latest two batches stays persisted; older
ones are released, and a checkpoint replaces the latest by its copy read back from the
checkpoint store, which cuts the lineage.

Timeouts are measured in batch time: a key is idle since the batch of its last value.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from functools import partial
from typing import Any

from service.graph import state_functions as fn
from service.graph.dstream import RDD, DStream, TransformedDStream
from service.graph.state_spec import StateSpec
from service.graph.stateful import (
    Batch,
    Piece,
    StatefulDStream,
    batch_time_of,
    persist,
    release,
    union_partitioned,
)

Merge = Callable[[int, Iterable[Any]], Iterator[Any]]
KEPT_STATES = 2


class StateDStream(StatefulDStream):
    """The internal stream of state records (see `state_functions`); users see `StateView`s."""

    def __init__(
        self,
        parent: DStream,
        kind: str,
        merge: Merge,
        partitions: int,
        initial: Iterable[tuple[Any, Any]] | None,
    ) -> None:
        super().__init__(parent.ctx, [parent], kind)
        self.partitions = partitions
        self.params.update(partitions=partitions, initial=initial is not None)
        self._merge = merge
        self._initial = list(initial) if initial is not None else None
        self._states: list[tuple[int, RDD]] = []
        self._may_have_state = bool(self._initial)

    def compute(self, batch: Batch) -> RDD:
        t = batch_time_of(batch)
        self.decide_empty(t, self.parents[0].is_empty(batch) and not self._may_have_state)
        if self._states and self._states[-1][0] >= t:
            msg = (
                f"{self.kind}: state of batch {t} asked for after batch {self._states[-1][0]}; "
                "state advances one batch at a time, in order"
            )
            raise fn.StateError(msg)
        inputs = [self._previous(t)] if self._states or self._initial else []
        if not self.parents[0].is_empty(batch):
            tagged = self.parents[0].rdd_at(batch).mapPartitionsWithIndex(fn.tag_new_values)
            inputs.append(tagged.partitionBy(self.partitions))
            self._may_have_state = True
        if not inputs:
            return self.ctx.sc.emptyRDD()
        union = union_partitioned(self.ctx.sc, inputs)
        merged = persist(union.mapPartitions(partial(self._merge, t), preservesPartitioning=True))
        self._states = [*self._states, (t, merged)]
        return merged

    def _previous(self, t: int) -> RDD:
        if self._states:
            return self._states[-1][1]
        start = partial(fn.initial_entries, t)
        rows = self.ctx.sc.parallelize(self._initial or [], self.partitions)
        return rows.mapPartitions(start).partitionBy(self.partitions)

    def forget(self, batch_time: int) -> None:
        self.drop_rdds(batch_time)
        while len(self._states) > KEPT_STATES:
            release(self._states.pop(0)[1])

    def checkpoint_pieces(self, batch_time: int) -> list[Piece]:
        if not self._states:
            rdd = self._previous(batch_time)
        else:
            rdd = self._states[-1][1].filter(fn.is_state_entry)
        return [Piece(self.piece_name("state"), rdd, "state")]

    def restore(self, batch_time: int, pieces: dict[str, RDD]) -> None:
        for _, rdd in self._states:
            release(rdd)
        self._states = [(batch_time, persist(pieces[self.piece_name("state")]))]
        self._may_have_state = True


class StateView(TransformedDStream):
    """A user-facing view of a state stream: its `(key, state)` pairs, or the mapped records."""

    def __init__(self, state: StateDStream, kind: str, select: Callable[..., Any]) -> None:
        super().__init__(state.ctx, [state], kind, partial(_select_step, select))
        self.state = state

    def state_snapshots(self) -> DStream:
        """`(key, state)` for every key with state, every batch."""
        return StateView(self.state, "state_snapshots", fn.state_pairs)

    def changes(self) -> DStream:
        """`(key, state)` for the keys whose state appeared or changed in this batch."""
        return StateView(self.state, "state_changes", fn.changed_pairs)


def _select_step(select: Callable[..., Any], rdds: list[RDD], _t: int) -> RDD:
    return rdds[0].mapPartitions(select, preservesPartitioning=True)


# --- the operators (DStream's methods delegate here) -------------------------------------------


def update_state_by_key(
    stream: DStream,
    update_fn: fn.UpdateFunction,
    num_partitions: int | None = None,
    initial: Iterable[tuple[Any, Any]] | None = None,
) -> StateView:
    """`update_fn(new_values, state) -> state | None` for every key with new values or state,
    every batch; None removes the key. The stream is every `(key, state)`, every batch."""
    parts = num_partitions if num_partitions is not None else stream.ctx.default_partitions
    merge = partial(fn.update_state_partition, update_fn)
    state = StateDStream(stream, "update_state_by_key", merge, parts, initial)
    return StateView(state, "state_pairs", fn.state_pairs)


def map_with_state(stream: DStream, spec: StateSpec) -> StateView:
    """The records `spec.function` returns; `.state_snapshots()` gives the state itself."""
    parts = spec.num_partitions or stream.ctx.default_partitions
    merge = partial(fn.map_with_state_partition, spec.function, spec.timeout_ms)
    state = StateDStream(stream, "map_with_state", merge, parts, spec.initial)
    state.params["timeout_ms"] = spec.timeout_ms
    return StateView(state, "mapped_with_state", fn.mapped_records)
