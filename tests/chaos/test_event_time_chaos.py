"""Chaos with event time: out-of-order clicks with about 5% late ones survive driver SIGKILLs.

The job (`examples.late_clicks`) counts clicks per page in 10 s event-time windows (2 s slack,
10 s allowed lateness) into PostgreSQL (upsert on page and window start, highest revision wins)
and sends clicks too late for their window to the dead-letter topic. Half the input is
preloaded, half streamed while the driver is SIGKILLed at random moments `KILLS` times, then
started a last time to drain the input and stopped gracefully.

The reference replays the journal: each batch's input is what its journaled offset ranges
read, fed batch by batch to the plain-Python model of `tests/spark/event_reference.py`. Then
the PostgreSQL table holds, for every (page, window), exactly the model's value at the model's
revision, and the dead-letter topic holds exactly as many late clicks as the model found late.

The default run (8,000 clicks, 3 SIGKILLs: 4 starts) is sized for about 60-90 s on a quiet
2-core machine (most of it in the drivers' starts); `make soak` runs the full size through
`DSTREAMS_EVENT_CHAOS_LINES` and `DSTREAMS_EVENT_CHAOS_KILLS` (≥ 10 kills). `CHAOS_SEED`
repeats a run's input and kill moments.
"""

from __future__ import annotations

import operator
import os
import random
import time
from typing import Any

import psycopg
import pytest

from examples.late_clicks import (
    LATENESS_MS,
    LENGTH_MS,
    PAGE_WINDOWS,
    SLACK_MS,
    parse_click,
    postgres_sink,
)
from service.dev.service_process import ServiceProcess
from service.graph.state_functions import constant_one
from service.journal.base import JournalState
from tests.chaos.conftest import (
    INPUT_PARTITIONS,
    ChaosApp,
    Feeder,
    chaos_seed,
    read_topic,
)
from tests.spark import event_reference as reference

LINES = int(os.environ.get("DSTREAMS_EVENT_CHAOS_LINES", "8000"))
KILLS = int(os.environ.get("DSTREAMS_EVENT_CHAOS_KILLS", "3"))
JOB = "examples.late_clicks:build"
LATE_SHARE = 0.05
STEP_MS = 5  # event time advances 5 ms per click in production order
PAGES = tuple(f"/p{i}" for i in range(20))
STREAMED_PER_SECOND = max(300, LINES // 60)


def make_clicks(seed: int, count: int) -> list[str]:
    """`"<page> <event ms>"` in production order: a few hundred ms out of order (within the
    slack), and about 5% of them 15-60 s behind (late, or corrections within the lateness)."""
    rng = random.Random(seed)
    clicks = []
    for index in range(count):
        event = 1_000_000 + index * STEP_MS + rng.randint(-400, 400)
        if rng.random() < LATE_SHARE:
            event -= rng.randint(15_000, 60_000)
        clicks.append(f"{rng.choice(PAGES)} {max(0, event)}")
    return clicks


def event_config(app: ChaosApp) -> dict[str, Any]:
    return {
        "job": JOB,
        "sinks": {PAGE_WINDOWS: postgres_sink(app.dsn, "page_windows")},
        "checkpoint": {
            "path": str(app.workdir / "state" / "checkpoints"),
            "interval_batches": 3,
        },
    }


@pytest.mark.timeout(1800 if KILLS > 3 else 600)
def test_event_windows_survive_kills_exactly(chaos_app: ChaosApp) -> None:
    seed = chaos_seed()
    rng = random.Random(seed)
    app = chaos_app
    app.rate_per_partition = 400
    app.dead_letter_topic = f"{app.app_id}.dead-letters"
    clicks = make_clicks(seed, LINES)
    values = [click.encode() for click in clicks]
    positions, feeder = Feeder.after_preloading(
        app.bootstrap, app.input_topic, values, LINES // 2, STREAMED_PER_SECOND
    )
    driver = app.service(**event_config(app))
    started = time.monotonic()

    feeder.start()
    for _ in range(KILLS):
        kill_at_random(app, driver, rng)
    driver.start()
    feeder.finish()
    app.wait_drained(driver)
    app.stop(driver)
    print(f"{driver.starts} starts in {time.monotonic() - started:.0f}s")

    state = app.journal_state()
    state.validate()
    assert not state.pending(), "batches still pending"
    line_at = dict(zip(positions + feeder.positions, clicks, strict=True))
    model = reference_model()
    reference.run(model, batches_read(state, app.input_topic, line_at))
    expected = {key: (value, model.revisions[key]) for key, value in model.emitted.items()}
    found = table_rows(app)
    assert found == expected, difference(found, expected)
    assert model.late_total > 0 and any(r > 0 for _v, r in expected.values())
    assert late_dead_letters(app) == model.late_total
    print(f"{len(found)} windows, {model.late_total} late clicks: equal to the reference")


def kill_at_random(app: ChaosApp, driver: ServiceProcess, rng: random.Random) -> None:
    driver.start()
    app.wait_started(driver)
    time.sleep(rng.uniform(1.0, 6.0))
    assert driver.running(), f"the driver died by itself\n{driver.log_tail()}"
    code = driver.kill()
    assert code == -9, f"expected death by SIGKILL, got exit {code}\n{driver.log_tail()}"


# --- the reference ---------------------------------------------------------------------------


def reference_model() -> reference.Model:
    return reference.Model(
        _event_ms,
        constant_one,
        operator.add,
        LENGTH_MS,
        LENGTH_MS,
        SLACK_MS,
        LATENESS_MS,
    )


def _event_ms(value: int) -> int:
    return value


def batches_read(
    state: JournalState, topic: str, line_at: dict[tuple[int, int], str]
) -> list[list[tuple[str, int]]]:
    """The clicks each journaled batch read, batch by batch in batch order."""
    first = {
        r.partition: r.from_offset
        for t in sorted(state.planned, reverse=True)
        for r in state.planned[t].ranges
    }
    assert first == dict.fromkeys(range(INPUT_PARTITIONS), 0), (
        f"the journal no longer holds the first batches (first offsets {first}); the reference "
        "needs every batch"
    )
    batches = []
    for t in sorted(state.planned):
        batch = []
        for r in state.planned[t].ranges:
            assert r.topic == topic
            batch.extend(
                parse_click(line_at[(r.partition, offset)])
                for offset in range(r.from_offset, r.until_offset)
            )
        batches.append(batch)
    return batches


# --- what the sinks hold ---------------------------------------------------------------------


def table_rows(app: ChaosApp) -> dict[tuple[str, int], tuple[int, int]]:
    with psycopg.connect(app.dsn, autocommit=True) as conn:
        rows = conn.execute("SELECT page, start_ms, end_ms, clicks, revision FROM page_windows")
        found = {}
        for page, start, end, clicks, revision in rows.fetchall():
            assert end == start + LENGTH_MS
            found[(str(page), int(start))] = (int(clicks), int(revision))
    return found


def late_dead_letters(app: ChaosApp) -> int:
    assert app.dead_letter_topic is not None
    late = 0
    for message in read_topic(app.bootstrap, app.dead_letter_topic):
        headers = dict(message.headers() or [])
        if headers.get("dstreams.error.type") == b"LateRecord":
            late += 1
    return late


def difference(found: dict[Any, Any], expected: dict[Any, Any]) -> str:
    wrong = [(k, found.get(k), expected.get(k)) for k in set(found) | set(expected)]
    wrong = [w for w in wrong if w[1] != w[2]]
    return f"{len(wrong)} windows differ (window, found, expected): {sorted(wrong)[:10]}"
