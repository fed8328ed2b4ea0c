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
batch (the two inside the checkpoint), one batch point and one executor point. `make soak` also
runs the shortest cut with the checkpoints on S3-compatible object storage (a real SeaweedFS
server, the `s3_server` fixture; 6,000 lines, the two checkpoint crash points, 3 starts, about
three minutes): the drivers take the server's keys from their environment, as pods do from a
Secret, their executors upload the parts, and the checkpoints recovery uses are read back from
the bucket and verified. `make soak` runs
the issue's full size with every crash point through `DSTREAMS_STATE_CHAOS_LINES`,
`DSTREAMS_STATE_CHAOS_KILLS` and `DSTREAMS_STATE_CHAOS_POINTS=all`. The seed is printed
(`CHAOS_SEED` repeats a run's input and kill moments).
"""

from __future__ import annotations

import os
import random
import time
from dataclasses import dataclass
from typing import Any

import pytest

from service.config.runtime import CheckpointSettings
from service.dev.environ import patched_environ
from service.dev.service_process import ServiceProcess
from service.faults import CRASH_EXIT_CODE
from service.journal.base import JournalState
from tests.chaos.conftest import (
    INPUT_PARTITIONS,
    ChaosApp,
    Feeder,
    chaos_seed,
    log_text,
    make_lines,
    wait_until,
    word_totals,
)
from tests.chaos.stateful_checks import (
    CHECKPOINT_EVERY,
    check_windows,
    check_windows_whole,
    stateful_config,
    verify_totals,
    wait_windows_closed,
)
from tests.soak import soak_only

LINES = int(os.environ.get("DSTREAMS_STATE_CHAOS_LINES", "24000"))
KILLS = int(os.environ.get("DSTREAMS_STATE_CHAOS_KILLS", "2"))
EVERY_POINT = os.environ.get("DSTREAMS_STATE_CHAOS_POINTS", "") == "all"
RATE_PER_PARTITION = 400
CHECKPOINT_POINTS = ("checkpoint-files-written", "checkpoint-journaled")
BATCH_POINTS = ("after-planned", "before-completed", "before-ack", "before-sink-commit")
ALL_EXECUTOR_POINTS = ("task-after-write", "task-before-write", "sink-mid-write")
DRIVER_POINTS = CHECKPOINT_POINTS + (BATCH_POINTS if EVERY_POINT else BATCH_POINTS[-1:])
EXECUTOR_POINTS = ALL_EXECUTOR_POINTS if EVERY_POINT else ALL_EXECUTOR_POINTS[-1:]


@dataclass(frozen=True)
class Cut:
    """How much of the run a variant does, and where its checkpoints go."""

    lines: int
    driver_points: tuple[str, ...]
    executor_points: tuple[str, ...]
    kills: int
    streamed_per_second: int
    """Streamed over about as long as the starts take, so deaths land while input arrives."""
    rate_per_partition: int = RATE_PER_PARTITION
    """Few starts need a lower rate, so that enough batches (and windows) read input."""
    on_object_storage: bool = False


ON_FILES = Cut(LINES, DRIVER_POINTS, EXECUTOR_POINTS, KILLS, max(300, LINES // 150))
# The shortest cut: only the deaths inside a checkpoint, where object storage differs.
ON_S3 = Cut(6000, CHECKPOINT_POINTS, (), 0, 150, rate_per_partition=100, on_object_storage=True)


@pytest.mark.timeout(1800 if EVERY_POINT else 900)
@pytest.mark.parametrize(
    "cut",
    [
        pytest.param(ON_FILES, id="checkpoints-on-files"),
        # The store itself, and a death between its data and manifests, are tested against the
        # same server in tests/spark/test_s3_checkpoints.py, within `make test`.
        pytest.param(
            ON_S3,
            id="checkpoints-on-s3",
            marks=soak_only("a second stateful chaos run, about three minutes"),
        ),
    ],
)
def test_state_and_windows_survive_kills_at_every_point(
    chaos_app: ChaosApp, cut: Cut, request: pytest.FixtureRequest
) -> None:
    seed = chaos_seed()
    rng = random.Random(seed)
    app = chaos_app
    app.rate_per_partition = cut.rate_per_partition
    lines = make_lines(seed, cut.lines)
    values = [line.encode() for line in lines]
    positions, feeder = Feeder.after_preloading(
        app.bootstrap, app.input_topic, values, cut.lines // 2, cut.streamed_per_second
    )
    config, env = stateful_config(app), None
    if cut.on_object_storage:
        s3_server = request.getfixturevalue("s3_server")
        config["checkpoint"] = s3_checkpoints(app, s3_server)
        env = s3_server.credentials
    driver = app.service(env=env, **config)
    started = time.monotonic()

    feeder.start()
    for point in cut.driver_points:
        crash_at(driver, point)
    for point in cut.executor_points:
        kill_after_a_worker_died(app, driver, point, rng)
    for _ in range(max(0, cut.kills - len(cut.executor_points))):
        kill_at_random(app, driver, rng)
    driver.start()
    feeder.finish()
    # About three times the batches the input needs at the rate limit (240 s at least): the full
    # size under `make soak` needs longer than the cut.
    batches = cut.lines / (cut.rate_per_partition * INPUT_PARTITIONS)
    app.wait_drained(driver, timeout_s=max(240.0, 3.0 * batches))
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
    if cut.on_object_storage:
        check_checkpoints_in_the_bucket(app, state, config["checkpoint"], env or {})


# --- checkpoints on object storage -----------------------------------------------------------


def s3_checkpoints(app: ChaosApp, s3_server: Any) -> dict[str, Any]:
    """`checkpoint` settings on the test's S3 server, under a prefix of this app's own."""
    return {
        "path": f"s3://{s3_server.bucket}/{app.app_id}/checkpoints",
        "interval_batches": CHECKPOINT_EVERY,
        "s3": {"endpoint_url": s3_server.endpoint_url, "path_style": True},
    }


def check_checkpoints_in_the_bucket(
    app: ChaosApp, state: JournalState, checkpoint: dict[str, Any], env: dict[str, str]
) -> None:
    """The journal's retained checkpoints are in the bucket, each part matching its manifest,
    and nothing of them was written to the local disk."""
    with patched_environ(env):  # as the driver processes found the keys
        store = CheckpointSettings.model_validate(checkpoint).store()
        journaled = [c for c in state.retained_checkpoints if c.refs]
        assert journaled, "no checkpoint with state was journaled"
        assert {c.batch_time for c in journaled} <= set(store.batch_times())
        for record in journaled:
            for ref in record.refs.values():
                store.verify(ref)
    assert not (app.workdir / "state" / "checkpoints").exists()
    print(f"{len(journaled)} journaled checkpoints verified in {store.location}")


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
