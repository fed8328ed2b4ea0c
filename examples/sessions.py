"""Sessions with `map_with_state`: each line is `user action`; a session ends on `logout` or
after 60 s of batch time without an action, and then one summary row is written.

Configure the `events` source and a `sessions` sink.
"""

from __future__ import annotations

from typing import Any

from service.graph import State, StateSpec
from service.graph.context import StreamingContext

SESSION_TIMEOUT_MS = 60_000


def user_and_action(line: str) -> tuple[str, str]:
    user, _, action = line.partition(" ")
    return (user, action or "view")


def track(batch_time: int, user: str, action: str | None, state: State) -> Any:
    """State: `[first batch time, actions]`; returns a summary when the session ends."""
    first, actions = state.get() if state.exists() else (batch_time, 0)
    if state.is_timing_out():
        return {"user": user, "start": first, "actions": actions, "end": "timeout"}
    if action == "logout":
        state.remove()
        return {"user": user, "start": first, "actions": actions + 1, "end": batch_time}
    state.update((first, actions + 1))
    return None


def build(ctx: StreamingContext) -> None:
    events = ctx.source("events").map(user_and_action)
    events.map_with_state(StateSpec(track, timeout_ms=SESSION_TIMEOUT_MS)).write("sessions")
