"""Rescaling state across a restart: a new `num_partitions` is taken up at recovery.

A keyed state (`update_state_by_key`, `map_with_state`) or a keyed window
(`reduce_by_key_and_window`, `count_by_value_and_window`) is hash-partitioned into a fixed number
of partitions, and so are the batches computed from it. Changing the number is a change of the
job's graph, which recovery refuses in general (`recovery.check_graph`); this one it accepts,
because what the state holds does not depend on how it is partitioned:

- the checkpoint is read in the partitions it was written in and moved into the ones the
  journaled batches were planned with (`KeyedState.restore`, `ReducedWindow.restore`);
- the journaled batches (completed ones recomputed, pending ones replayed with their outputs)
  run in the partition count of the graph that planned them, so that a replayed batch writes
  exactly the output partitions its first attempt wrote, which the sinks' (batch, partition)
  keys require;
- then the state moves into the new count (`rescale`), and new batches are planned with the new
  graph, which the journal records with its first plan (docs/architecture.md, "Recovery").

Other partition counts (stateless shuffles, event-time windows) are still refused as graph
changes.
"""

from __future__ import annotations

import logging
from typing import Any

from service.graph.context import StreamingContext
from service.graph.disk_state import DiskKeyedState
from service.graph.state import KeyedState
from service.graph.window import ReducedWindow

log = logging.getLogger(__name__)

RESCALABLE_KINDS = frozenset(
    {"update_state_by_key", "map_with_state", "reduce_by_key_and_window", "update_state_on_disk"}
)
Rescalable = KeyedState | ReducedWindow | DiskKeyedState


def state_rescales(old: dict[str, Any] | None, new: dict[str, Any]) -> dict[int, int] | None:
    """Stream id -> the partition count in `old`, for each keyed state or window whose count is
    all that differs between the two graph descriptions (`StreamingContext.graph_json`); None
    when they differ in anything else (or do not differ).

    >>> old = {"streams": [{"id": 3, "kind": "map_with_state", "params": {"partitions": 4}}]}
    >>> new = {"streams": [{"id": 3, "kind": "map_with_state", "params": {"partitions": 8}}]}
    >>> state_rescales(old, new)
    {3: 4}
    >>> state_rescales(new, new) is None
    True
    """
    if old is None or {**old, "streams": None} != {**new, "streams": None}:
        return None
    before, after = old.get("streams", []), new.get("streams", [])
    if len(before) != len(after):
        return None
    rescaled: dict[int, int] = {}
    for was, now in zip(before, after, strict=True):
        if was == now:
            continue
        if now["kind"] not in RESCALABLE_KINDS or _without_partitions(was) != _without_partitions(
            now
        ):
            return None
        rescaled[now["id"]] = was["params"]["partitions"]
    return rescaled or None


def _without_partitions(stream: dict[str, Any]) -> dict[str, Any]:
    return {**stream, "params": {**stream.get("params", {}), "partitions": None}}


class Rescale:
    """The states recovery computes in their journaled partition count, then moves."""

    def __init__(self, ctx: StreamingContext, journaled: dict[int, int]) -> None:
        streams = {stream.node_id: stream for stream in ctx.stateful_streams()}
        self.states: list[tuple[Rescalable, int, int]] = []
        for node_id, partitions in journaled.items():
            computation = streams[node_id].computation
            if not isinstance(computation, Rescalable):  # as state_rescales says
                msg = f"stream {node_id} ({computation.kind}) cannot be rescaled"
                raise TypeError(msg)
            self.states.append((computation, partitions, computation.partitions))

    def before_recovery(self) -> None:
        """The journaled batches run in the count that planned them."""
        for state, journaled, _ in self.states:
            state.partitions = journaled

    def after_replay(self) -> None:
        """New batches run in the configured count."""
        for state, journaled, configured in self.states:
            state.rescale(configured)
            log.warning(
                "%s rescaled from %d to %d partitions: the journaled batches ran in the old "
                "count, new batches run in the new one",
                state.kind,
                journaled,
                configured,
            )
