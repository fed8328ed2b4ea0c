"""A sink whose server is down is waited for with backoff, up to its limit, and the failed step
runs again (`service.driver.sink_outages`); meanwhile /readyz says why it is not ready and the
wait is counted. Fakes only: the real server stopped for a while is tests/postgres."""

from __future__ import annotations

from typing import Any, cast

import pytest

from service.driver.sink_outages import FIRST_BACKOFF_S, MAX_BACKOFF_S, SinkOutages
from service.errors import SinkError, SinkUnavailable
from service.graph.outputs import SinkOutput
from service.observe.metrics import Metrics
from service.observe.observer import Observer
from service.observe.status import StatusBoard
from sinks.memory import MemorySink

pytestmark = pytest.mark.unit


class FlakyServerSink(MemorySink):
    """A sink whose server answers again after `down_probes` probes."""

    def __init__(self, down_probes: int, outage_limit_s: float = 60.0) -> None:
        super().__init__()
        self.down_probes = down_probes
        self.outage_limit_s = outage_limit_s
        self.probes = 0

    def unreachable(self) -> str | None:
        self.probes += 1
        return "connection refused" if self.probes <= self.down_probes else None

    def outage_in(self, error: BaseException) -> str | None:
        return "lost the server" if isinstance(error, ServerLost) else None


class ServerLost(SinkError):
    """A step's failure that shows the server went away during it."""


class Clock:
    def __init__(self) -> None:
        self.now = 0.0
        self.pauses: list[float] = []

    def sleep(self, seconds: float) -> None:
        self.pauses.append(seconds)
        self.now += seconds


def observed(sink: Any, ready: bool = True) -> tuple[SinkOutages, Observer, Clock, SinkOutput]:
    board = StatusBoard("app", 1000)
    board.set_ready(ready)
    observer = Observer("app", 1000, Metrics(process_metrics=False), board, None, None)
    clock = Clock()
    outages = SinkOutages(observer, sleep=clock.sleep, clock=lambda: clock.now)
    return outages, observer, clock, SinkOutput(cast(Any, None), "counts", sink)


def failing(
    times: int, seen: list[bool], observer: Observer, error: type[SinkError] = SinkError
) -> Any:
    """A step that fails `times` times with `error`, noting whether /readyz was ready at each
    call."""
    calls = [0]

    def step() -> str:
        seen.append(observer.board.ready)
        calls[0] += 1
        if calls[0] <= times:
            msg = "could not write: connection refused"
            raise error(msg)
        return "written"

    return step


def metric(observer: Observer, name: str) -> float | None:
    return observer.metrics.registry.get_sample_value(name, {"output": "counts"})


def test_an_outage_is_waited_out_with_backoff_and_the_step_runs_again() -> None:
    outages, observer, clock, output = observed(FlakyServerSink(down_probes=6))
    seen: list[bool] = []

    assert outages.run(output, failing(1, seen, observer)) == "written"

    # The first probe found it down, then five more after pauses: 0.5, 1, 2, 4, 8, 8 s.
    expected = [min(FIRST_BACKOFF_S * 2**n, MAX_BACKOFF_S) for n in range(6)]
    assert clock.pauses == expected
    assert seen == [True, False]  # not ready while waiting, and at the retry
    assert observer.board.ready  # ready again afterwards
    assert metric(observer, "dstreams_sink_outage_retries_total") == 6
    assert metric(observer, "dstreams_sink_outage_seconds_total") == sum(expected)
    assert metric(observer, "dstreams_sink_unreachable") == 0


def test_readyz_names_the_output_and_the_reason_while_waiting() -> None:
    outages, observer, clock, output = observed(FlakyServerSink(down_probes=2))
    reasons: list[str] = []
    step = failing(1, [], observer)

    def noting() -> str:
        reasons.append(observer.board.not_ready_because)
        return cast(str, step())

    outages.run(output, noting)
    assert "counts" in reasons[-1] and "connection refused" in reasons[-1]


def test_an_outage_longer_than_the_limit_stops_with_a_message_naming_the_setting() -> None:
    outages, observer, clock, output = observed(FlakyServerSink(100, outage_limit_s=20.0))

    with pytest.raises(SinkUnavailable) as raised:
        outages.run(output, failing(1, [], observer))

    assert clock.now == 20.0  # waited exactly the limit, the last pause cut to fit
    assert "sinks.counts.outage_limit_ms" in str(raised.value)
    assert isinstance(raised.value.__cause__, SinkError)
    assert not observer.board.ready


def test_a_failure_while_the_server_answers_is_raised_at_once() -> None:
    outages, observer, clock, output = observed(FlakyServerSink(down_probes=0))

    with pytest.raises(SinkError, match="connection refused") as raised:
        outages.run(output, failing(1, [], observer))

    assert not isinstance(raised.value, SinkUnavailable)
    assert clock.pauses == []
    assert observer.board.ready


def test_a_sink_without_a_server_is_not_waited_for() -> None:
    outages, observer, clock, output = observed(MemorySink())

    with pytest.raises(SinkError):
        outages.run(output, failing(1, [], observer))
    assert clock.pauses == []


def test_an_outage_before_the_first_batch_leaves_the_service_not_ready() -> None:
    outages, observer, clock, output = observed(FlakyServerSink(down_probes=1), ready=False)

    outages.run(output, failing(1, [], observer))

    assert not observer.board.ready  # ready only once the first batch completes


def test_an_outage_that_ended_before_the_probe_is_waited_out_not_raised() -> None:
    # The server came back between the step's failure and the probe: the failure is still the
    # outage's, so the step runs again after a pause instead of stopping the service.
    outages, observer, clock, output = observed(FlakyServerSink(down_probes=0))

    assert outages.run(output, failing(1, [], observer, ServerLost)) == "written"

    assert clock.pauses == [FIRST_BACKOFF_S]
    assert observer.board.ready


def test_steps_that_keep_failing_for_outages_are_bounded_by_the_limit() -> None:
    outages, observer, clock, output = observed(FlakyServerSink(0, outage_limit_s=20.0))

    with pytest.raises(SinkUnavailable, match="lost the server") as raised:
        outages.run(output, failing(1_000, [], observer, ServerLost))

    assert clock.now == pytest.approx(20.0)  # counted from the first failure, not each one
    assert isinstance(raised.value.__cause__, ServerLost)
