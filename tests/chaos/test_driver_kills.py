"""Random driver kills: SIGKILL the driver at random moments, restart it, and demand exact sinks.

Input: 200,000 lines (60,000 in `make test`), half preloaded before the first start and half
streamed (about 1,500 lines/s) while the driver is being killed, 10 times (4 in `make test`).
`max_rate_per_partition` keeps each batch to at most 20,000 lines, so batches are short, many are
in flight when a kill lands, and the run ends in bounded time. The seed (printed; set
`CHAOS_SEED` to repeat a run) decides the kill moments.
"""

from __future__ import annotations

import random
import re
import time

import pytest

from tests.chaos.conftest import (
    ChaosApp,
    Feeder,
    chaos_seed,
    log_text,
    make_lines,
    word_totals,
)
from tests.soak import sized

# `make test` runs a cut: 60,000 lines and 4 kills.
LINES = sized(60_000, 200_000)
PRELOADED = LINES // 2
STREAMED_PER_SECOND = 1_500
KILLS = sized(4, 10)
RATE_PER_PARTITION = 5_000


@pytest.mark.timeout(900)
def test_random_driver_kills_leave_every_sink_exact(chaos_app: ChaosApp) -> None:
    seed = chaos_seed()
    rng = random.Random(seed)
    app = chaos_app
    app.rate_per_partition = RATE_PER_PARTITION
    lines = make_lines(seed, LINES)
    values = [line.encode() for line in lines]
    _preloaded, feeder = Feeder.after_preloading(
        app.bootstrap, app.input_topic, values, PRELOADED, STREAMED_PER_SECOND
    )
    driver = app.service()
    started = time.monotonic()

    driver.start()
    feeder.start()
    # The first kill lands a few seconds into steady work; later ones anywhere after Spark is up
    # (during recovery, a replay, or new batches).
    app.wait_completed(driver)
    time.sleep(rng.uniform(1.0, 4.0))
    kills: list[str] = []
    for kill in range(1, KILLS + 1):
        assert driver.running(), f"the driver died by itself\n{driver.log_tail()}"
        code = driver.kill()
        assert code == -9, f"expected death by SIGKILL, got exit {code}\n{driver.log_tail()}"
        kills.append(f"kill {kill} at {time.monotonic() - started:.1f}s")
        driver.start()
        if kill < KILLS:
            app.wait_started(driver)
            time.sleep(rng.uniform(2.0, 10.0))

    feeder.finish()
    app.wait_drained(driver)
    app.stop(driver)
    print("; ".join(kills))
    replays = [
        int(n)
        for n in re.findall(r"recovered: epoch \d+, (\d+) batches replayed", log_text(driver))
    ]
    print(f"batches replayed per start: {replays}; total {time.monotonic() - started:.0f}s")

    state = app.journal_state()
    assert len(state.epochs) == KILLS + 1, "every start must have opened its own epoch"
    app.verify(word_totals(lines))
