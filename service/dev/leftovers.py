"""Local servers still running when the interpreter exits are stopped, never left behind.

A test or script that forgets `stop()` must not leave JVMs running; each server registers itself
while it runs and unregisters when stopped. Held weakly, so registration keeps nothing alive.
"""

from __future__ import annotations

import atexit
import weakref
from typing import Protocol


class Stoppable(Protocol):
    def stop(self) -> None: ...


_RUNNING: weakref.WeakSet[Stoppable] = weakref.WeakSet()


def stop_at_exit(server: Stoppable) -> None:
    _RUNNING.add(server)


def stopped(server: Stoppable) -> None:
    _RUNNING.discard(server)


@atexit.register
def _stop_leftovers() -> None:
    for server in list(_RUNNING):
        server.stop()
