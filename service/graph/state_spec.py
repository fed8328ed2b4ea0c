"""`StateSpec`: what `map_with_state` needs to know besides the input stream.

>>> def track(batch_time, key, value, state):
...     seen = (state.get() if state.exists() else 0) + (0 if value is None else 1)
...     if not state.is_timing_out():
...         state.update(seen)
...     return (key, seen)
>>> spec = StateSpec(track, timeout_ms=30_000)
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from service.errors import ConfigError
from service.graph.state_functions import MappingFunction, State

__all__ = ["State", "StateSpec"]


@dataclass(frozen=True)
class StateSpec:
    """`function(batch_time, key, value, state) -> mapped | None` and how state is kept.

    - `function` is called once per new `(key, value)` in input order, with the key's `State`
      (`exists()`, `get()`, `update(v)`, `remove()`, `is_timing_out()`); what it returns (unless
      None) is a record of the mapped stream.
    - `timeout_ms`: a key that received no value for this long, in batch time (never the wall
      clock), is called once more with `value=None` and `state.is_timing_out()` true, then
      dropped. None: keys never time out.
    - `num_partitions`: state partitions (default: the context's). Partition `p` must hold the
      same keys on every run and replay, so a new count takes effect at a restart: recovery runs
      the journaled batches in the old one, then moves the state (`service.driver.rescale`).
    - `initial`: `(key, state)` pairs the state starts from on a fresh start.

    `function` must be a top-level function (it is referenced by name, never pickled into a
    checkpoint).
    """

    function: MappingFunction
    timeout_ms: int | None = None
    num_partitions: int | None = None
    initial: Iterable[tuple[Any, Any]] | None = None

    def __post_init__(self) -> None:
        if not callable(self.function):
            msg = f"StateSpec: function must be callable, got {self.function!r}"
            raise ConfigError(msg)
        if self.timeout_ms is not None and self.timeout_ms <= 0:
            msg = f"StateSpec: timeout_ms must be positive or None, got {self.timeout_ms}"
            raise ConfigError(msg)
        if self.num_partitions is not None and self.num_partitions <= 0:
            msg = f"StateSpec: num_partitions must be positive, got {self.num_partitions}"
            raise ConfigError(msg)
