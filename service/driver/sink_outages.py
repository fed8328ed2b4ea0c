"""Waiting out a sink's outage instead of failing the batch (docs/architecture.md, "Faults").

A step of an output (its `setup`, its write job, its `commit`) that fails while the output's
sink reports its server unreachable (`sinks.base.WaitsOutOutages`) is not a failure yet. The
driver:

1. asks the sink why it is unreachable, or failing that whether the step's error shows it was
   unreachable during the step (an outage that ended meanwhile); no reason means the step failed
   for another reason, which is raised as it is;
2. marks the service not ready (`/readyz`) and logs one line naming the output and the reason;
3. sleeps with backoff (`FIRST_BACKOFF_S` doubling up to `MAX_BACKOFF_S`) and asks again,
   counting the retries and the seconds waited (`dstreams_sink_outage_retries_total`,
   `dstreams_sink_outage_seconds_total`), until the sink answers, or its `outage_limit_s` has
   passed since the step first failed for an outage (`SinkUnavailable`, exit 5: a restart
   replays the batch); a step that keeps failing for outages while the server answers between
   them is bounded by the same limit;
4. runs the step again: writes are idempotent, so what committed before the outage is skipped;
   once it succeeds, the service is ready again (if it was before).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Protocol, TypeVar

from service.errors import SinkUnavailable
from service.graph.base import OutputOperation
from service.graph.outputs import SinkOutput
from sinks.base import WaitsOutOutages

log = logging.getLogger(__name__)
T = TypeVar("T")

# The first pause is short (a server restart takes about a second); later ones grow so that a
# long outage costs few connection attempts, and stay short against a minute-long outage.
FIRST_BACKOFF_S = 0.5
MAX_BACKOFF_S = 8.0


class OutageObserver(Protocol):
    def sink_outage_began(self, output: str, reason: str) -> None: ...

    def sink_outage_waited(self, output: str, seconds: float) -> None: ...

    def sink_outage_ended(self, output: str) -> None: ...


class RunDirectly:
    """No waiting: each step runs once (graphs run without a service, tests)."""

    def run(self, output: OutputOperation, step: Callable[[], T]) -> T:
        return step()


class SinkOutages:
    """Runs an output's steps, waiting out its sink's outages (see the module docstring)."""

    def __init__(
        self,
        observer: OutageObserver,
        *,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.observer = observer
        self.sleep = sleep
        self.clock = clock

    def run(self, output: OutputOperation, step: Callable[[], T]) -> T:
        """`step()`'s result, once it succeeds with the sink reachable."""
        began: float | None = None
        """When the step first failed for an outage; its limit counts from there."""
        while True:
            try:
                result = step()
            except Exception as error:
                sink = waiting_sink(output)
                reason = None if sink is None else sink.unreachable() or sink.outage_in(error)
                if sink is None or reason is None:
                    raise
                began = self.clock() if began is None else began
                self.wait(output.name, sink, reason, error, began)
                continue
            if began is not None:
                self.observer.sink_outage_ended(output.name)
            return result

    def wait(
        self, output: str, sink: WaitsOutOutages, why: str, error: Exception, began: float
    ) -> None:
        """Until `sink` is reachable; `SinkUnavailable` once its outage limit, counted from
        `began`, has passed."""
        reason: str | None = why
        mark = self.clock()
        pause = FIRST_BACKOFF_S
        self.observer.sink_outage_began(output, why)
        log.warning("output %s: sink unreachable (%s); waiting for it", output, why)
        while reason is not None:
            left = sink.outage_limit_s - (mark - began)
            if left <= 0:
                raise SinkUnavailable(outage_message(output, sink, reason)) from error
            self.sleep(min(pause, left))
            reason = sink.unreachable()
            now = self.clock()
            self.observer.sink_outage_waited(output, now - mark)
            mark, pause = now, min(2 * pause, MAX_BACKOFF_S)
        log.info("output %s: sink reachable again after %.1fs; retrying", output, mark - began)


def waiting_sink(output: OutputOperation) -> WaitsOutOutages | None:
    """The output's sink if it waits out outages, else None."""
    if isinstance(output, SinkOutput) and isinstance(output.sink, WaitsOutOutages):
        return output.sink
    return None


def outage_message(output: str, sink: WaitsOutOutages, reason: str) -> str:
    return (
        f"output {output}: expected its sink's server back within {sink.outage_limit_s:.0f}s "
        f"(sinks.{output}.outage_limit_ms), it is still unreachable: {reason}; bring it back "
        "and restart (the batch is replayed from the journal), or raise the limit"
    )
