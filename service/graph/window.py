"""Window operators: a stream whose batch `t` covers the batches of the last `length_ms`.

A windowed stream produces rows only at slide boundaries (batch times that are multiples of
`slide_ms`); in between it is empty. The window at `t` covers the batches with times in
`(t - length_ms, t]`. Each stream remembers the per-batch RDDs it still needs (a window's
batches, and with an inverse function the batches that will leave it) and releases them after.

`reduce_by_key_and_window` with an inverse function is incremental, as in the D-Streams paper:
the window at `t` is the window at `t - slide_ms`, minus the batches that left, plus the ones
that entered. Like Spark, a key whose values all left keeps the reduction's identity value
(e.g. a count of 0) unless `filter_fn` drops it; the first window, and a window whose previous
boundary did not run, are reduced from their batches instead (so are all windows when the
slide is longer than the window). A window that no batch entered or left is the previous one:
after an outage, down-time boundaries without input reuse it, and once a job has found it empty
(one per quiet spell) every boundary after it is empty without a job (docs/architecture.md,
Recovery). That decision reads data, but data the journaled plans fix, so a replay decides the
same.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

from service.graph import state_functions as fn
from service.graph.base import RDD, BatchStream, GraphContext
from service.graph.plan import BatchPlan
from service.graph.stateful import (
    Piece,
    StatefulComputation,
    check_duration,
    in_partitions,
    is_materialized,
    persist,
    release,
    union_partitioned,
)

Reduce = Callable[[Any, Any], Any]
KeyFilter = Callable[[tuple[Any, Any]], bool]


class Window(StatefulComputation):
    """`window(length_ms, slide_ms)`: at each boundary, every row of the window's batches."""

    def __init__(
        self, ctx: GraphContext, parent: BatchStream, length_ms: int, slide_ms: int | None
    ) -> None:
        interval = ctx.batch_interval_ms
        self.length_ms = check_duration("window", "length_ms", length_ms, interval)
        self.slide_ms = check_duration("window", "slide_ms", slide_ms or interval, interval)
        super().__init__(ctx, parent, "window")
        self.params.update(length_ms=self.length_ms, slide_ms=self.slide_ms)
        self._batches: dict[int, RDD] = {}

    def is_boundary(self, batch_time: int) -> bool:
        return batch_time % self.slide_ms == 0

    def _empty(self, t: int) -> bool:
        return not self.is_boundary(t) or not self._in_window(t)

    def compute(self, plan: BatchPlan) -> RDD:
        t = plan.batch_time
        if not self.parent.is_empty(plan):
            # A copy without partitioner, so a window restored from a checkpoint has the same
            # partitions as one that was not (output partition p must not change on replay).
            own = self.parent.rdd_at(plan).mapPartitions(fn.pass_through)
            self._batches[t] = persist(own)
        if self.decide_empty(t, self._empty(t)):
            return self.ctx.sc.emptyRDD()
        return self.ctx.sc.union(self._in_window(t))

    def _in_window(self, t: int) -> list[RDD]:
        return [self._batches[b] for b in sorted(self._batches) if t - self.length_ms < b <= t]

    def _needed_after(self, t: int) -> int:
        """Batches at or before this time are in no later window."""
        return (t // self.slide_ms + 1) * self.slide_ms - self.length_ms

    def forget(self, batch_time: int) -> None:
        horizon = self._needed_after(batch_time)
        for b in [b for b in self._batches if b <= horizon]:
            release(self._batches.pop(b))

    def checkpoint_pieces(self, batch_time: int) -> list[Piece]:
        horizon = self._needed_after(batch_time)
        return [
            Piece(f"batch-{b}", rdd, "rows")
            for b, rdd in sorted(self._batches.items())
            if b > horizon
        ]

    def restore(self, batch_time: int, pieces: dict[str, RDD]) -> None:
        for rdd in self._batches.values():
            release(rdd)
        self._batches = {}
        for name, rdd in pieces.items():
            if name.startswith("batch-"):
                self._batches[int(name.removeprefix("batch-"))] = persist(rdd)


class ReducedWindow(StatefulComputation):
    """`reduce_by_key_and_window`: per key, the reduction of the window's values."""

    def __init__(
        self,
        ctx: GraphContext,
        parent: BatchStream,
        reduce: Reduce,
        inverse: Reduce | None,
        length_ms: int,
        slide_ms: int | None,
        partitions: int,
        filter_fn: KeyFilter | None,
        kind: str = "reduce_by_key_and_window",
    ) -> None:
        interval = ctx.batch_interval_ms
        self.length_ms = check_duration(kind, "length_ms", length_ms, interval)
        self.slide_ms = check_duration(kind, "slide_ms", slide_ms or interval, interval)
        super().__init__(ctx, parent, kind)
        self.reduce, self.inverse = reduce, inverse
        self.partitions, self.filter_fn = partitions, filter_fn
        self.params.update(
            length_ms=self.length_ms,
            slide_ms=self.slide_ms,
            partitions=partitions,
            incremental=inverse is not None,
        )
        self._batches: dict[int, RDD] = {}
        self._window: tuple[int, RDD] | None = None
        # Earlier windows the current one may still be computed from (see `forget`).
        self._superseded: list[RDD] = []
        # The window RDD a job found rows in, so an unchanged window is not asked again.
        self._has_rows: RDD | None = None

    def is_boundary(self, batch_time: int) -> bool:
        return batch_time % self.slide_ms == 0

    def _empty(self, t: int) -> bool:
        if not self.is_boundary(t):
            return True
        return self._previous(t) is None and not self._between(t - self.length_ms, t)

    def compute(self, plan: BatchPlan) -> RDD:
        t = plan.batch_time
        if not self.parent.is_empty(plan):
            reduced = self.parent.rdd_at(plan).reduceByKey(self.reduce, self.partitions)
            self._batches[t] = persist(reduced)
        if self.decide_empty(t, self._empty(t)):
            if self.is_boundary(t):
                self._set_window(None)
            return self.ctx.sc.emptyRDD()
        previous = self._previous(t)
        if previous is not None and not self._moved(t):
            return self._unchanged(t, previous)
        window = self._from_scratch(t) if previous is None else self._incremental(t, previous)
        if self.filter_fn is not None:
            keep = partial(fn.filter_pairs, self.filter_fn)
            window = window.mapPartitions(keep, preservesPartitioning=True)
        if self.inverse is not None:
            self._set_window((t, persist(window)))
        return window

    def _previous(self, t: int) -> RDD | None:
        # Windows that do not overlap (slide > length) share nothing to carry over.
        if self.inverse is None or self._window is None or self.slide_ms > self.length_ms:
            return None
        return self._window[1] if self._window[0] == t - self.slide_ms else None

    def _moved(self, t: int) -> bool:
        """Whether a batch entered the window at `t` or left it since the previous boundary."""
        slide, length = self.slide_ms, self.length_ms
        return bool(self._between(t - slide, t) or self._between(t - slide - length, t - length))

    def _unchanged(self, t: int, previous: RDD) -> RDD:
        """The window at `t` when nothing entered or left: the previous one (already filtered),
        or nothing at all once a job has found that empty."""
        if previous is not self._has_rows and not any(
            previous.mapPartitions(fn.has_rows).collect()
        ):
            self.decide_empty(t, True)
            self._set_window(None)
            return self.ctx.sc.emptyRDD()
        self._has_rows = previous
        self._set_window((t, previous))
        return previous

    def _between(self, after: int, until: int) -> list[RDD]:
        return [self._batches[b] for b in sorted(self._batches) if after < b <= until]

    def _from_scratch(self, t: int) -> RDD:
        pieces = self._between(t - self.length_ms, t)
        return union_partitioned(self.ctx.sc, pieces).reduceByKey(self.reduce, self.partitions)

    def _incremental(self, t: int, previous: RDD) -> RDD:
        assert self.inverse is not None  # noqa: S101 - _previous is None without one
        slide, length = self.slide_ms, self.length_ms
        tagged = [_tagged(previous, fn.PREVIOUS)]
        tagged += [_tagged(rdd, fn.ENTERING) for rdd in self._between(t - slide, t)]
        tagged += [
            _tagged(rdd, fn.LEAVING) for rdd in self._between(t - slide - length, t - length)
        ]
        merge = partial(fn.merge_window_partition, self.reduce, self.inverse)
        union = union_partitioned(self.ctx.sc, tagged)
        return union.mapPartitions(merge, preservesPartitioning=True)

    def _set_window(self, window: tuple[int, RDD] | None) -> None:
        if self._window is not None and (window is None or window[1] is not self._window[1]):
            self._superseded.append(self._window[1])
        self._window = window

    def _needed_after(self, t: int) -> int:
        reach = self.length_ms + (self.slide_ms if self.inverse is not None else 0)
        return (t // self.slide_ms + 1) * self.slide_ms - reach

    def forget(self, batch_time: int) -> None:
        horizon = self._needed_after(batch_time)
        for b in [b for b in self._batches if b <= horizon]:
            release(self._batches.pop(b))
        # An incremental window is computed from the previous one: releasing that before a job
        # has materialized the new one would make Spark recompute every window back to the last
        # checkpoint.
        if self._window is None or is_materialized(self._window[1]):
            for rdd in self._superseded:
                release(rdd)
            self._superseded = []

    def checkpoint_pieces(self, batch_time: int) -> list[Piece]:
        horizon = self._needed_after(batch_time)
        pieces = [
            Piece(f"batch-{b}", rdd, "pairs")
            for b, rdd in sorted(self._batches.items())
            if b > horizon
        ]
        if self._window is not None:
            pieces.append(Piece(f"window-{self._window[0]}", self._window[1], "pairs"))
        return pieces

    def restore(self, batch_time: int, pieces: dict[str, RDD]) -> None:
        for rdd in self._batches.values():
            release(rdd)
        self._batches = {}
        # Read back from files, the pieces depend on no earlier RDD: release every window now.
        self._set_window(None)
        for rdd in self._superseded:
            release(rdd)
        self._superseded = []
        for name, piece in pieces.items():
            rdd = in_partitions(piece, self.partitions)
            if name.startswith("batch-"):
                self._batches[int(name.removeprefix("batch-"))] = persist(rdd)
            elif name.startswith("window-"):
                self._window = (int(name.removeprefix("window-")), persist(rdd))

    def rescale(self, partitions: int) -> None:
        """From the next batch on, the window's batches and windows live in `partitions` hash
        partitions (see `KeyedState.rescale`, which recovery calls the same way). What the
        window still holds moves now, each RDD materialized before its old one is released."""
        if partitions == self.partitions:
            return
        self.partitions = partitions
        held = [*self._batches.values(), *self._superseded]
        self._batches = {b: self._repartitioned(rdd) for b, rdd in self._batches.items()}
        if self._window is not None:
            held.append(self._window[1])
            self._window = (self._window[0], self._repartitioned(self._window[1]))
        self._superseded, self._has_rows = [], None
        for rdd in held:
            release(rdd)

    def _repartitioned(self, rdd: RDD) -> RDD:
        moved = persist(in_partitions(rdd, self.partitions))
        moved.count()  # materialized while the RDD it is moved from is still persisted
        return moved


def _tagged(rdd: RDD, tag: int) -> RDD:
    return rdd.map(partial(fn.tag_window_value, tag), preservesPartitioning=True)
