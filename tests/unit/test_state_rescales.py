"""Which graph changes recovery carries over as a rescaled keyed state, and which it refuses."""

from __future__ import annotations

from typing import Any

from service.driver.rescale import state_rescales


def stream(node_id: int, kind: str, **params: Any) -> dict[str, Any]:
    return {"id": node_id, "kind": kind, "params": params, "parents": [node_id - 1]}


def graph(*streams: dict[str, Any], sink: str = "kafka") -> dict[str, Any]:
    outputs = [{"name": "out", "stream": streams[-1]["id"], "sink": sink}]
    return {"streams": list(streams), "outputs": outputs, "key_placement": "p"}


SOURCE = stream(0, "kafka", topics=["lines"])


def test_keyed_states_whose_count_alone_changed_are_rescaled() -> None:
    old = graph(
        SOURCE,
        stream(1, "update_state_by_key", partitions=4),
        stream(2, "map_with_state", partitions=4, timeout_ms=None),
    )
    new = graph(
        SOURCE,
        stream(1, "update_state_by_key", partitions=8),
        stream(2, "map_with_state", partitions=2, timeout_ms=None),
    )
    assert state_rescales(old, new) == {1: 4, 2: 4}


def test_anything_else_changed_alongside_is_refused() -> None:
    old = graph(SOURCE, stream(1, "update_state_by_key", partitions=4, ttl_ms=None))
    assert (
        state_rescales(old, graph(SOURCE, stream(1, "update_state_by_key", partitions=8, ttl_ms=5)))
        is None
    )
    assert (
        state_rescales(
            old,
            graph(
                SOURCE, stream(1, "update_state_by_key", partitions=8, ttl_ms=None), sink="files"
            ),
        )
        is None
    )
    assert (
        state_rescales(old, graph(SOURCE, stream(1, "map_with_state", partitions=8, ttl_ms=None)))
        is None
    )
    longer = graph(
        SOURCE, stream(1, "update_state_by_key", partitions=8, ttl_ms=None), stream(2, "map")
    )
    assert state_rescales(old, longer) is None


def test_keyed_windows_are_rescaled_other_counts_are_not() -> None:
    def rescales(kind: str) -> dict[int, int] | None:
        return state_rescales(
            graph(SOURCE, stream(1, kind, partitions=4)),
            graph(SOURCE, stream(1, kind, partitions=8)),
        )

    assert rescales("reduce_by_key_and_window") == {1: 4}
    for kind in ("reduce_by_key", "combine_by_key", "join", "window", "event_window"):
        assert rescales(kind) is None, kind


def test_no_journaled_graph_or_no_change_is_no_rescale() -> None:
    same = graph(SOURCE, stream(1, "update_state_by_key", partitions=4))
    assert state_rescales(None, same) is None
    assert state_rescales(same, same) is None
