"""Chaos with state: a running word count and a sliding window survive every kind of death exactly.

The job (`examples.stateful_all_sinks`) keeps each word's running total with
`update_state_by_key` and writes the changed totals to PostgreSQL (upsert on the word) and Kafka,
and counts the words of the last 4 s every 2 s with `reduce_by_key_and_window` and an inverse,
to files. State is checkpointed every 3 batches. Half the input is preloaded, half streamed while
one driver process is started again and again:

1. once at each driver crash point, the two inside the checkpoint included (files written but the
   checkpoint not journaled; journaled but the older checkpoint not yet deleted);
2. once at each executor crash point, where one Python worker dies (`DSTREAMS_CRASH_ONCE`) and
   Spark retries its task; then the driver is SIGKILLed;
3. until `KILLS` SIGKILLs are reached, at a random moment;
4. a last time, left to drain the input and stopped gracefully.

Then PostgreSQL holds every word's true total, the last committed Kafka record of every word is
its total, and every committed window file holds exactly the counts of the input its window's
journaled batches read. Across the outages batch time has no hole (the restarted driver runs the
batches of its down time), a window was written at every slide boundary from the first batch on,
and all windows together count every word exactly length / slide times.

`make test` runs a smaller cut (24,000 lines, 2 SIGKILLs, 6 starts, about 2 minutes on a busy
2-core machine): the crash points the stateless chaos tier does not already cover for every
batch (the two inside the checkpoint), one batch point and one executor point. `make soak` runs
the issue's full size with every crash point through `DSTREAMS_STATE_CHAOS_LINES`,
`DSTREAMS_STATE_CHAOS_KILLS` and `DSTREAMS_STATE_CHAOS_POINTS=all`. The seed is printed
(`CHAOS_SEED` repeats a run's input and kill moments).
"""

from __future__ import annotations

import os
import random
import time

import pytest

from service.dev.service_process import ServiceProcess
from service.faults import CRASH_EXIT_CODE
from tests.chaos.conftest import (
    ChaosApp,
    Feeder,
    chaos_seed,
    log_text,
    make_lines,
    wait_until,
    word_totals,
)
from tests.chaos.stateful_checks import (
    check_windows,
    check_windows_whole,
    stateful_config,
    verify_totals,
    wait_windows_closed,
)

LINES = int(os.environ.get("DSTREAMS_STATE_CHAOS_LINES", "24000"))
KILLS = int(os.environ.get("DSTREAMS_STATE_CHAOS_KILLS", "2"))
EVERY_POINT = os.environ.get("DSTREAMS_STATE_CHAOS_POINTS", "") == "all"
RATE_PER_PARTITION = 400
# Streamed over about as long as the starts take, so kills land while input arrives.
STREAMED_PER_SECOND = max(300, LINES // 150)
CHECKPOINT_POINTS = ("checkpoint-files-written", "checkpoint-journaled")
BATCH_POINTS = ("after-planned", "before-completed", "before-ack", "before-sink-commit")
ALL_EXECUTOR_POINTS = ("task-after-write", "task-before-write", "sink-mid-write")
DRIVER_POINTS = CHECKPOINT_POINTS + (BATCH_POINTS if EVERY_POINT else BATCH_POINTS[-1:])
EXECUTOR_POINTS = ALL_EXECUTOR_POINTS if EVERY_POINT else ALL_EXECUTOR_POINTS[-1:]


@pytest.mark.timeout(1800 if EVERY_POINT else 900)
def test_state_and_windows_survive_kills_at_every_point(chaos_app: ChaosApp) -> None:
    seed = chaos_seed()
    rng = random.Random(seed)
    app = chaos_app
    app.rate_per_partition = RATE_PER_PARTITION
    lines = make_lines(seed, LINES)
    values = [line.encode() for line in lines]
    positions, feeder = Feeder.after_preloading(
        app.bootstrap, app.input_topic, values, LINES // 2, STREAMED_PER_SECOND
    )
    driver = app.service(**stateful_config(app))
    started = time.monotonic()

    feeder.start()
    for point in DRIVER_POINTS:
        crash_at(driver, point)
    for point in EXECUTOR_POINTS:
        kill_after_a_worker_died(app, driver, point, rng)
    for _ in range(max(0, KILLS - len(EXECUTOR_POINTS))):
        kill_at_random(app, driver, rng)
    driver.start()
    feeder.finish()
    app.wait_drained(driver)
    wait_windows_closed(app, driver)
    app.stop(driver)
    print(f"{driver.starts} starts in {time.monotonic() - started:.0f}s")

    state = app.journal_state()
    state.validate()
    assert not state.pending(), "batches still pending"
    assert len(state.epochs) == driver.starts, "every start must have opened its own epoch"
    verify_totals(app, word_totals(lines))
    line_at = dict(zip(positions + feeder.positions, lines, strict=True))
    checked = check_windows(app, state, line_at)
    print(f"{checked} window files equal their reference")
    boundaries = check_windows_whole(app, state, line_at)
    print(
        f"a window at each of {boundaries} slide boundaries, counting the input length/slide times"
    )


# --- the starts ----------------------------------------------------------------------------


def crash_at(driver: ServiceProcess, point: str) -> None:
    """One start that dies at `point`; a batch point lets the start's first batch (the replay of
    what the previous death left) go by, so each death follows a completed recovery."""
    env = {"DSTREAMS_CRASH_AT": point}
    if not point.startswith("checkpoint-"):
        env["DSTREAMS_CRASH_AFTER"] = "2"
    driver.start(env)
    code = driver.wait(240)
    assert code == CRASH_EXIT_CODE, f"{point}: exit {code}\n{driver.log_tail()}"
    assert f"crash point {point!r} reached" in this_start(driver), driver.log_tail()


def kill_after_a_worker_died(
    app: ChaosApp, driver: ServiceProcess, point: str, rng: random.Random
) -> None:
    """One start in which one Python worker dies at `point` (in its second pass, so not in the
    replay the start begins with) and Spark retries its task; SIGKILLed after that."""
    once = app.workdir / f"crashed-at-{point}"
    driver.start(
        {"DSTREAMS_CRASH_AT": point, "DSTREAMS_CRASH_AFTER": "2", "DSTREAMS_CRASH_ONCE": str(once)}
    )

    def a_worker_died() -> bool:
        assert driver.running(), f"the driver died with its worker\n{driver.log_tail()}"
        return f"crash point {point!r} reached" in this_start(driver)

    wait_until(a_worker_died, 240, f"a Python worker to die at {point}")
    # The driver carries on: Spark's retry of the task got past the point.
    completed = int((driver.status() or {}).get("totals", {}).get("completed", 0))
    app.wait_completed(driver, completed + 1)
    time.sleep(rng.uniform(0.0, 2.0))
    sigkill(driver)


def kill_at_random(app: ChaosApp, driver: ServiceProcess, rng: random.Random) -> None:
    driver.start()
    app.wait_started(driver)
    time.sleep(rng.uniform(1.0, 6.0))
    sigkill(driver)


def sigkill(driver: ServiceProcess) -> None:
    assert driver.running(), f"the driver died by itself\n{driver.log_tail()}"
    code = driver.kill()
    assert code == -9, f"expected death by SIGKILL, got exit {code}\n{driver.log_tail()}"


def this_start(driver: ServiceProcess) -> str:
    return log_text(driver).split(f"--- start {driver.starts - 1} ---")[-1]
