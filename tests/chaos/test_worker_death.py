"""Python worker death mid-task: Spark retries the task, the driver never restarts, output exact.

`DSTREAMS_CRASH_AT=task-before-write` / `task-after-write` with `DSTREAMS_CRASH_AFTER=5` kills
every Python worker at its fifth write task (the count is per worker process, so each
replacement worker dies again at its fifth, for the whole run). Spark (`local[2,4]`: four attempts
per task) runs the lost task again on another worker. After `task-after-write` the sink has
committed the write, so the retry must skip it: the driver's duplicate-writes-suppressed counter
shows that for every output.
"""

from __future__ import annotations

import pytest

from tests.chaos.conftest import (
    OUTPUTS,
    ChaosApp,
    log_text,
    make_lines,
    metric,
    produce,
    wait_until,
    word_totals,
)
from tests.soak import soak_only

LINES = 24_000


@pytest.mark.timeout(400)
@pytest.mark.parametrize(
    "point",
    [
        # A death before any write is also every task's death in test_crash_points.
        pytest.param("task-before-write", marks=soak_only("a second worker-death run")),
        "task-after-write",
    ],
)
def test_python_worker_death_is_retried_by_spark(chaos_app: ChaosApp, point: str) -> None:
    app = chaos_app
    # The Python workers must run the Kafka writes too (under this local master `auto` keeps them
    # on the driver, which a worker's death cannot reach).
    app.kafka_write_from = "executors"
    lines = make_lines(11, LINES)
    produce(app.bootstrap, app.input_topic, [line.encode() for line in lines])
    driver = app.service()

    driver.start({"DSTREAMS_CRASH_AT": point, "DSTREAMS_CRASH_AFTER": "5"})
    if point == "task-after-write":

        def every_output_skipped_a_retry() -> bool:
            assert driver.running(), driver.log_tail()
            found = [
                metric(driver, "dstreams_duplicate_writes_suppressed_total", output=o)
                for o in OUTPUTS
            ]
            return all(n is not None and n >= 1 for n in found)

        wait_until(every_output_skipped_a_retry, 180, "a skipped retry on every output")
    app.wait_drained(driver)
    crashes = log_text(driver).count(f"crash point {point!r} reached")
    app.stop(driver)

    assert crashes >= 1, "no Python worker died at the crash point"
    assert driver.starts == 1
    assert len(app.journal_state().epochs) == 1, "the driver must never have restarted"
    print(f"{crashes} Python workers died at {point}; the driver stayed up")
    app.verify(word_totals(lines))
