"""Plain-Python reference model of the window and state operators, for the golden tests.

Each function takes one list of rows per batch (batch `i` at `FIRST_BATCH_MS + i * INTERVAL_MS`)
and returns one list of output rows per batch, empty where the operator writes nothing. It is
written the obvious, brute-force way: windows are recomputed from their batches, state is a dict
folded batch by batch; only the documented quirks of the incremental window (a key whose values
all left keeps the identity value unless filtered) are modelled on purpose.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from service.testing import FIRST_BATCH_MS, INTERVAL_MS

Rows = list[Any]


def batch_time(index: int) -> int:
    return FIRST_BATCH_MS + index * INTERVAL_MS


def in_window(batches: list[Rows], index: int, length_ms: int) -> list[Rows]:
    t = batch_time(index)
    return [rows for i, rows in enumerate(batches[: index + 1]) if t - length_ms < batch_time(i)]


def window(batches: list[Rows], length_ms: int, slide_ms: int) -> list[Rows]:
    out: list[Rows] = []
    for index in range(len(batches)):
        is_boundary = batch_time(index) % slide_ms == 0
        out.append(
            [r for rows in in_window(batches, index, length_ms) for r in rows]
            if is_boundary
            else []
        )
    return out


def _reduce(pairs: list[tuple[Any, Any]], f: Callable[[Any, Any], Any]) -> dict[Any, Any]:
    out: dict[Any, Any] = {}
    for key, value in pairs:
        out[key] = f(out[key], value) if key in out else value
    return out


def reduce_by_key_and_window(
    batches: list[Rows],
    f: Callable[[Any, Any], Any],
    inv: Callable[[Any, Any], Any] | None,
    length_ms: int,
    slide_ms: int,
    keep: Callable[[tuple[Any, Any]], bool] | None = None,
) -> list[Rows]:
    """Brute force per window; with `inv`, keys of the previous window stay (identity value)."""
    out: list[Rows] = []
    previous: dict[Any, Any] | None = None
    for index in range(len(batches)):
        if batch_time(index) % slide_ms:
            out.append([])
            continue
        rows = [r for rows in in_window(batches, index, length_ms) for r in rows]
        current = _reduce(rows, f)
        if inv is not None and previous is not None:
            zero = {key: inv(value, value) for key, value in previous.items()}
            current = {**zero, **current}
        has_data = any(in_window(batches, index, length_ms)) or previous is not None
        if keep is not None:
            current = {k: v for k, v in current.items() if keep((k, v))}
        # The previous window only carries over to the next boundary (slide apart).
        overlapping = slide_ms <= length_ms
        previous = current if (inv is not None and has_data and overlapping) else None
        out.append(sorted(current.items(), key=repr) if has_data else [])
    return out


def update_state_by_key(
    batches: list[Rows], update: Callable[[list[Any], Any], Any], ttl_ms: int | None = None
) -> list[Rows]:
    """`update` per key with values or state, every batch; with `ttl_ms`, a key whose last value
    came that long ago (in batch time) is dropped without a call."""
    state: dict[Any, Any] = {}
    last_value_at: dict[Any, int] = {}
    out: list[Rows] = []
    for index, rows in enumerate(batches):
        t = batch_time(index)
        values: dict[Any, list[Any]] = {}
        for key, value in rows:
            values.setdefault(key, []).append(value)
            last_value_at[key] = t
        for key in list(state) + [k for k in values if k not in state]:
            if ttl_ms is not None and key not in values and t - last_value_at[key] >= ttl_ms:
                del state[key]
                continue
            new = update(values.get(key, []), state.get(key))
            if new is None:
                state.pop(key, None)
            else:
                state[key] = new
        out.append(sorted(state.items(), key=repr))
    return out


class ModelState:
    """The `State` a mapping function sees, in the model."""

    def __init__(self, value: Any, exists: bool, timing_out: bool = False) -> None:
        self.value, self._exists, self._timing_out = value, exists, timing_out

    def exists(self) -> bool:
        return self._exists

    def get(self) -> Any:
        assert self._exists
        return self.value

    def update(self, value: Any) -> None:
        assert not self._timing_out
        self.value, self._exists = value, True

    def remove(self) -> None:
        self.value, self._exists = None, False

    def is_timing_out(self) -> bool:
        return self._timing_out


def map_with_state(
    batches: list[Rows], function: Callable[..., Any], timeout_ms: int | None
) -> tuple[list[Rows], list[Rows]]:
    """`function` per value in input order; idle keys time out after `timeout_ms` batch time.
    Returns the mapped records and the `(key, state)` snapshots, per batch."""
    state: dict[Any, tuple[Any, int]] = {}
    out: list[Rows] = []
    snapshots: list[Rows] = []
    for index, rows in enumerate(batches):
        t = batch_time(index)
        mapped: list[Any] = []
        seen: set[Any] = set()
        for key, value in rows:
            seen.add(key)
            old = state.get(key)
            handle = ModelState(old[0] if old else None, old is not None)
            result = function(t, key, value, handle)
            if result is not None:
                mapped.append(result)
            if handle.exists():
                state[key] = (handle.value, t)
            else:
                state.pop(key, None)
        for key in [k for k in state if k not in seen]:
            value, touched = state[key]
            if timeout_ms is not None and t - touched >= timeout_ms:
                result = function(t, key, None, ModelState(value, True, timing_out=True))
                if result is not None:
                    mapped.append(result)
                del state[key]
        out.append(sorted(mapped, key=repr))
        snapshots.append(sorted(((k, v) for k, (v, _) in state.items()), key=repr))
    return out, snapshots
