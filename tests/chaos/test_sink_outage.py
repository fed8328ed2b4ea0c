"""PostgreSQL stopped mid-stream, and at start-up: the service waits for it, then is exact.

The test runs a PostgreSQL server of its own (`LocalPostgres`, not the session's), stops that
server process (fast shutdown, by its PID) and starts it again on the same port and data:

- mid-stream for `OUTAGE_S` (60 s, under `make soak` only) while input keeps
  coming: the driver keeps running, `/readyz` is 503 naming the output, the wait is counted in
  `dstreams_sink_outage_seconds_total` and `..._retries_total`, Kafka and files outputs wait
  with the batch; afterwards every sink holds every input line's words exactly once;
- before the driver starts: set-up waits too, instead of "refused to start";
- longer than `outage_limit_ms`: exit 5 with one line saying a sink was unavailable.
"""

from __future__ import annotations

import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from service.dev.postgres_server import LocalPostgres
from service.dev.service_process import ServiceProcess
from tests.chaos.conftest import (
    PG_OUT,
    ChaosApp,
    Feeder,
    chaos_seed,
    log_text,
    make_lines,
    metric,
    produce,
    wait_until,
    word_totals,
)
from tests.soak import soak_only

OUTAGE_S = 60.0
PER_SECOND = 100
PRELOADED = 500
# Fed from the first completed batches until well past the outage, so that batches keep having
# PostgreSQL rows to write (an empty batch writes nothing and would not notice the outage).
LINES = PRELOADED + int(PER_SECOND * (OUTAGE_S + 30))
STARTUP_OUTAGE_S = 12.0


@pytest.fixture
def own_postgres() -> Iterator[LocalPostgres]:
    with LocalPostgres() as server:
        yield server


@pytest.fixture
def outage_app(
    kafka_bootstrap: str, own_postgres: LocalPostgres, unique_name: str, tmp_path: Path
) -> Iterator[ChaosApp]:
    suffix = unique_name.rsplit("_", 1)[-1]
    app = ChaosApp(f"pgout_{suffix}", kafka_bootstrap, own_postgres.dsn, tmp_path)
    app.create_input()
    try:
        yield app
    finally:
        app.kill_all()


def readyz(driver: ServiceProcess) -> tuple[int, str]:
    """`/readyz`'s status and body (0 while the endpoint does not answer)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{driver.port}/readyz", timeout=5) as r:  # noqa: S310 - loopback
            return int(r.status), r.read().decode()
    except urllib.error.HTTPError as error:
        return int(error.code), error.read().decode()
    except OSError:
        return 0, ""


def assert_waits_through(driver: ServiceProcess, seconds: float) -> None:
    """For `seconds`: the driver runs, not ready, naming the PostgreSQL output once it waits."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        assert driver.running(), driver.log_tail()
        code, body = readyz(driver)
        assert code in (0, 503), f"ready during the outage: {code} {body}"
        time.sleep(1.0)


@pytest.mark.timeout(600)
@soak_only("PostgreSQL down for a minute, and the input to fill it: about two minutes")
def test_postgres_stopped_mid_stream_is_waited_for_then_exact(
    outage_app: ChaosApp, own_postgres: LocalPostgres
) -> None:
    app = outage_app
    lines = make_lines(chaos_seed(), LINES)
    _, feeder = Feeder.after_preloading(
        app.bootstrap, app.input_topic, [line.encode() for line in lines], PRELOADED, PER_SECOND
    )
    driver = app.service()
    driver.start()
    app.wait_completed(driver, batches=2)
    wait_until(lambda: readyz(driver)[0] == 200, 60, "/readyz to turn ready")
    feeder.start()
    time.sleep(3)

    own_postgres.stop_server()
    wait_until(lambda: PG_OUT in readyz(driver)[1], 60, "/readyz to name the waiting output")
    assert metric(driver, "dstreams_sink_unreachable", output=PG_OUT) == 1
    assert_waits_through(driver, OUTAGE_S)
    own_postgres.restart_server()

    wait_until(lambda: readyz(driver)[0] == 200, 120, "/readyz to turn ready again")
    waited = metric(driver, "dstreams_sink_outage_seconds_total", output=PG_OUT) or 0.0
    retries = metric(driver, "dstreams_sink_outage_retries_total", output=PG_OUT) or 0.0
    # From the first failed write job (some seconds into the outage) to the server's return.
    assert 0 < waited <= OUTAGE_S + 30 and retries >= 2, (waited, retries)
    feeder.finish()
    app.wait_drained(driver)
    app.stop(driver)
    app.verify(word_totals(lines))
    print(f"PostgreSQL down {OUTAGE_S:.0f}s: waited {waited:.1f}s over {retries:.0f} retries")


@pytest.mark.timeout(300)
def test_postgres_down_at_start_up_is_waited_for_not_refused(
    outage_app: ChaosApp, own_postgres: LocalPostgres
) -> None:
    app = outage_app
    lines = make_lines(chaos_seed(), 1_000)
    produce(app.bootstrap, app.input_topic, [line.encode() for line in lines])
    own_postgres.stop_server()
    driver = app.service()
    driver.start()
    wait_until(lambda: "sink unreachable" in log_text(driver), 120, "the wait for PostgreSQL")
    assert_waits_through(driver, STARTUP_OUTAGE_S)
    own_postgres.restart_server()

    app.wait_drained(driver)
    app.stop(driver)
    app.verify(word_totals(lines))
    assert "refused to start" not in log_text(driver)


@pytest.mark.timeout(300)
def test_postgres_down_past_the_limit_stops_with_exit_5_not_refused(
    outage_app: ChaosApp, own_postgres: LocalPostgres
) -> None:
    app = outage_app
    produce(app.bootstrap, app.input_topic, [b"a line"])
    own_postgres.stop_server()
    config = app.config()
    config["sinks"][PG_OUT]["outage_limit_ms"] = "3s"
    driver = ServiceProcess(config, app.workdir, name="limited")
    app.services.append(driver)
    driver.start()

    assert driver.wait(240) == 5, driver.log_tail()
    log = log_text(driver)
    assert "dstreams stopped, a sink was unavailable" in log
    assert f"sinks.{PG_OUT}.outage_limit_ms" in log
    assert "refused to start" not in log
