"""StatusBoard: the recent-batches table, readiness and the scheduler heartbeat."""

from __future__ import annotations

import json
import threading

import pytest

from connectors.offsets import OffsetRange
from service.observe.status import RECOVERING, STANDBY, StatusBoard


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_snapshot_holds_the_streaming_tab_data() -> None:
    board = StatusBoard("wordcount", 1000)
    ranges = [OffsetRange("words", 0, 10, 25), OffsetRange("words", 1, 3, 3)]
    board.batch_started(2000, ranges, 0.05)
    board.batch_started(3000, [], 0.01)
    board.batch_finished(2000, 15, {"counts": 4}, 0.42, "completed")
    board.set_epoch(2)
    snap = json.loads(json.dumps(board.snapshot()))  # JSON-able
    assert snap["app"] == "wordcount" and snap["epoch"] == 2 and snap["ready"] is False
    assert snap["batch_interval_ms"] == 1000
    assert snap["totals"] == {"completed": 1, "failed": 0, "records_in": 15}
    first, second = snap["batches"]
    assert first == {
        "batch_time": 2000,
        "batch_time_iso": "1970-01-01T00:00:02.000Z",
        "ranges": [
            {"topic": "words", "partition": 0, "from": 10, "until": 25},
            {"topic": "words", "partition": 1, "from": 3, "until": 3},
        ],
        "planned_records": 15,
        "records_in": 15,
        "outputs": {"counts": 4},
        "processing_s": 0.42,
        "scheduling_delay_s": 0.05,
        "outcome": "completed",
        "breakdown": None,
        "end_to_end_s": None,
    }
    assert second["outcome"] == "running" and second["records_in"] is None


def test_breakdown_and_end_to_end_bounds_span_the_outputs() -> None:
    board = StatusBoard("wordcount", 1000)
    board.batch_started(2000, [], 0.0)
    outputs = {
        "counts": {"jobs": [], "end_to_end_s": {"min": 0.8, "max": 1.6}},
        "totals": {"jobs": [], "end_to_end_s": {"min": 0.9, "max": 1.9}},
        "empty": {"jobs": [], "end_to_end_s": None},
    }
    board.batch_breakdown(2000, {"steps": {"plan": 0.01}, "outputs": outputs})
    (batch,) = board.snapshot()["batches"]
    assert batch["breakdown"]["steps"] == {"plan": 0.01}
    assert batch["end_to_end_s"] == {"min": 0.8, "max": 1.9}


def test_recent_batches_are_bounded_and_oldest_drop_first() -> None:
    board = StatusBoard("wc", 100, max_batches=5)
    for t in [*range(100, 1100, 100), 50]:
        board.batch_started(t, [], 0.0)
    times = [batch["batch_time"] for batch in board.snapshot()["batches"]]
    assert times == [600, 700, 800, 900, 1000]


def test_readiness_flips() -> None:
    board = StatusBoard("wc", 1000)
    assert board.ready is False
    board.set_ready(True)
    assert board.ready is True and board.snapshot()["ready"] is True


def test_heartbeat_decides_health() -> None:
    clock = FakeClock()
    board = StatusBoard("wc", 1000, clock=clock)  # wedged after max(30 s, 10 intervals)
    assert board.healthy()[0]
    clock.now += 31
    healthy, why = board.healthy()
    assert not healthy and "wedged" in why and "31.0s" in why
    board.heartbeat()
    assert board.healthy()[0]
    clock.now += 31
    board.heartbeat_source = lambda: clock.now - 1  # the scheduler's own last tick
    assert board.healthy()[0] and board.snapshot()["heartbeat_age_s"] == 1.0


def test_start_lasts_through_recovery_until_the_first_batch_after_it() -> None:
    clock = FakeClock()
    board = StatusBoard("wc", 1000, clock=clock)
    started, progress = board.started()
    assert not started and progress.startswith("starting for 0s")
    clock.now += 5
    board.set_phase(RECOVERING)
    clock.now += 700  # far beyond the heartbeat's limit: recovering is not being wedged
    board.batch_finished(1_000, 3, {}, 0.1, "replayed")
    board.batch_finished(2_000, 3, {}, 0.1, "replayed")
    started, progress = board.started()
    assert not started
    assert progress == "recovering for 700s, 2 batches replayed so far"
    assert board.snapshot()["phase"] == RECOVERING
    board.batch_finished(3_000, 3, {}, 0.1, "completed")
    assert not board.started()[0]  # only readiness (the first batch after recovery) ends it
    board.set_ready(True)
    started, progress = board.started()
    assert started and progress == "running for 0s"
    assert board.snapshot()["started"] is True


def test_a_waiting_standby_has_started_and_recovers_again_when_elected() -> None:
    clock = FakeClock()
    board = StatusBoard("wc", 1000, clock=clock)
    board.set_phase(STANDBY)
    assert board.started() == (True, "standby for 0s")
    board.set_phase(RECOVERING)
    assert board.started() == (False, "recovering for 0s, 0 batches replayed so far")


def test_an_unknown_phase_is_refused() -> None:
    with pytest.raises(ValueError, match="not one of starting, standby"):
        StatusBoard("wc", 1000).set_phase("booting")


def test_concurrent_updates_are_safe() -> None:
    board = StatusBoard("wc", 10, max_batches=50)

    def work(offset: int) -> None:
        for i in range(200):
            t = offset + i * 10
            board.batch_started(t, [OffsetRange("t", 0, i, i + 1)], 0.0)
            board.batch_finished(t, 1, {"out": 1}, 0.01, "completed")
            board.snapshot()

    threads = [threading.Thread(target=work, args=(k * 100_000,)) for k in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    snap = board.snapshot()
    assert len(snap["batches"]) == 50
    assert snap["totals"]["completed"] == 800 and snap["totals"]["records_in"] == 800
