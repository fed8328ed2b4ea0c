"""Every named crash point, for each of the three sinks: die there, restart, exact result.

Each case is one app whose driver is started once per crash point, with
`DSTREAMS_CRASH_AT=<point>` in that start's environment only, and finally once without it; then
every sink must hold exactly the produced word totals.

- Driver points (`after-planned`, `before-sink-commit`, `before-completed`, `before-ack`) kill
  the driver (exit 137). They are reached once per batch for all outputs together, so one run
  writing all three sinks covers each point for each sink. `DSTREAMS_CRASH_AFTER=2` lets the
  first batch of the start go by: that is the replay of the batch the previous crash left
  unfinished, so each crash follows a completed recovery from the one before.
- Executor points (`sink-mid-write`, `task-before-write`, `task-after-write`) kill the Python
  worker running a write task. They fire in the first output's Spark job, so the job's output
  order decides which sink is hit: Kafka first (`build`), PostgreSQL first (`build_pg_first`),
  files first (`build_files_first`). Every fresh worker of that start dies at the point, so all
  Spark attempts of the task die, the job fails and the driver exits non-zero; the next start
  replays the batch. `task-before-write` runs before any sink code, so the Kafka-first case
  covers it for every sink; `sink-mid-write` (a partial write inside the sink) and
  `task-after-write` (a committed write whose task then dies, so the retry must skip) run with
  each sink first. These cases write Kafka from the executors (`write_from: executors`).
- With the Kafka sink writing from the driver (`write_from: driver`, what `auto` picks under a
  local master), `sink-mid-write` inside Kafka's transaction kills the driver itself, holding
  long-lived producers; the next start's producers fence them and replay the batch.
"""

from __future__ import annotations

import re

import pytest

from service.dev.service_process import ServiceProcess
from service.faults import CRASH_EXIT_CODE
from tests.chaos.conftest import (
    ChaosAppFactory,
    log_text,
    make_lines,
    produce,
    word_totals,
)
from tests.soak import SOAK

DRIVER_POINTS = ("after-planned", "before-sink-commit", "before-completed", "before-ack")
EXECUTOR_POINTS = ("sink-mid-write", "task-before-write", "task-after-write")
# Batches the restart after a driver crash must replay: all but `before-ack` die before
# `completed` is journaled.
REPLAYS_AFTER = {
    "sink-mid-write": 1,  # when the driver writes Kafka: inside its transaction
    "after-planned": 1,
    "before-sink-commit": 1,
    "before-completed": 1,
    "before-ack": 0,
}
JOBS = "examples.wordcount_all_sinks"

SINK_FIRST_POINTS = ("sink-mid-write", "task-after-write")

# The Kafka sink writing on the driver: its mid-transaction point kills the driver.
KAFKA_ON_DRIVER_POINTS = ("sink-mid-write", "before-sink-commit")

# `make test` leaves out the Kafka-first deaths inside and after a write: the PostgreSQL-first and
# files-first cases die there in the same Spark job, and kafka-on-driver dies inside Kafka's
# transaction. `make soak` runs them all.
KAFKA_FIRST_POINTS = DRIVER_POINTS + (EXECUTOR_POINTS if SOAK else ("task-before-write",))

CASES = [
    pytest.param(f"{JOBS}:build", KAFKA_FIRST_POINTS, 24_000, "executors", id="kafka-first"),
    pytest.param(f"{JOBS}:build_pg_first", SINK_FIRST_POINTS, 4_000, "auto", id="postgres-first"),
    pytest.param(f"{JOBS}:build_files_first", SINK_FIRST_POINTS, 4_000, "auto", id="files-first"),
    pytest.param(f"{JOBS}:build", KAFKA_ON_DRIVER_POINTS, 4_000, "driver", id="kafka-on-driver"),
]


@pytest.mark.timeout(600)
@pytest.mark.parametrize(("job", "points", "lines_count", "write_from"), CASES)
def test_each_crash_point_then_restart_is_exact(
    make_chaos_app: ChaosAppFactory,
    kafka_bootstrap: str,
    job: str,
    points: tuple[str, ...],
    lines_count: int,
    write_from: str,
) -> None:
    app = make_chaos_app(
        kafka_bootstrap, "cp", job=job, rate_per_partition=500, kafka_write_from=write_from
    )
    lines = make_lines(len(points), lines_count)
    produce(app.bootstrap, app.input_topic, [line.encode() for line in lines])
    driver = app.service()
    kills_driver = DRIVER_POINTS + (("sink-mid-write",) if write_from == "driver" else ())

    for point in points:
        crash_start(driver, point, kills_driver)
    driver.start()
    app.wait_drained(driver)
    app.stop(driver)

    check_recoveries(driver, points, kills_driver)
    app.verify(word_totals(lines))


def crash_start(driver: ServiceProcess, point: str, kills_driver: tuple[str, ...]) -> None:
    """One start with the crash point armed; returns once the driver has died of it."""
    env = {"DSTREAMS_CRASH_AT": point}
    if point in kills_driver:
        env["DSTREAMS_CRASH_AFTER"] = "2"
    driver.start(env)
    code = driver.wait(180)
    section = log_text(driver).split(f"--- start {driver.starts - 1} ---")[-1]
    assert f"crash point {point!r} reached" in section, (
        f"start with {point} exited {code} without reaching it\n{driver.log_tail()}"
    )
    if point in kills_driver:
        assert code == CRASH_EXIT_CODE, f"{point}: exit {code}\n{driver.log_tail()}"
    else:
        # The worker died on every attempt of the task, so Spark gave up on the job.
        assert code != 0, f"{point}: the driver survived every attempt dying\n{driver.log_tail()}"
        assert "Python worker exited unexpectedly" in section


def check_recoveries(
    driver: ServiceProcess, points: tuple[str, ...], kills_driver: tuple[str, ...]
) -> None:
    """After a driver crash, the next start replayed exactly the batches left unfinished."""
    sections = log_text(driver).split("--- start ")[1:]
    for index, point in enumerate(points):
        if point not in kills_driver:
            continue
        replayed = re.findall(r"recovered: epoch \d+, (\d+) batches replayed", sections[index + 1])
        assert replayed, f"start {index + 1} (after {point}) never finished recovery"
        assert int(replayed[0]) == REPLAYS_AFTER[point], (
            f"after a crash at {point}, expected {REPLAYS_AFTER[point]} replayed batch(es), "
            f"found {replayed[0]}"
        )
