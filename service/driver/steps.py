"""Where a batch's time goes: seconds per lifecycle step, for `/status`, the status page and
`dstreams_batch_step_seconds` (docs/architecture.md, Observability).

    >>> steps = StepTimer()
    >>> with steps.step("plan"):
    ...     pass
    >>> list(steps.seconds)
    ['plan']
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager


class StepTimer:
    """Adds up the monotonic seconds spent in each named step, in the order steps first ran."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    @contextmanager
    def step(self, name: str) -> Iterator[None]:
        started = time.monotonic()
        try:
            yield
        finally:
            self.seconds[name] = self.seconds.get(name, 0.0) + time.monotonic() - started
