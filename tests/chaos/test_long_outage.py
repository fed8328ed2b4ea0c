"""A long outage: the driver of a windowed job down for 10 minutes of a 1 s interval.

Ten minutes are not waited for: `service.testing.outage.journal_outage` writes the journal a driver
leaves when its last batch (which read nothing) was 10 minutes ago, and the input that arrived
during the outage (a backlog) is in the topic before the driver starts. The driver then takes
the real recovery and catch-up path (docs/architecture.md, "Recovery"):

- a batch for every interval of the down time, none skipped, run back to back until the driver
  is on time again; the catch-up is timed and printed (never asserted on: see `make
  bench-recovery`);
- the backlog spread over the first down-time batches within `max_rate_per_partition`;
- a window (`examples.sliding_counts`: 30 s every 10 s, to files) at every slide boundary,
  each equal to the counts of the lines its batches read, and all together counting every
  line's words exactly length / slide = 3 times.
"""

from __future__ import annotations

import re
import time
from collections import Counter
from typing import Any

import pytest
import yaml

from connectors.offsets import OffsetRange
from service.config.settings import load_settings
from service.graph.functions import words_of
from service.testing.outage import journal_outage
from sinks.files import FileSink
from tests.chaos.conftest import (
    INPUT_PARTITIONS,
    ChaosApp,
    Feeder,
    assert_same_totals,
    chaos_seed,
    log_text,
    make_lines,
)

DOWN_MS = 10 * 60 * 1000
INTERVAL_MS = 1000
WINDOW_MS, SLIDE_MS = 30_000, 10_000  # examples.sliding_counts
OUTPUT = "window_counts"
RATE_PER_PARTITION = 200
BACKLOG_LINES = 3_000  # 750 per partition: 4 down-time batches at 200 per partition
CATCH_UP_TIMEOUT_S = 240.0


@pytest.mark.timeout(420)
def test_ten_minutes_down_then_every_batch_and_window_of_the_outage(chaos_app: ChaosApp) -> None:
    app = chaos_app
    app.rate_per_partition = RATE_PER_PARTITION
    driver = app.service(
        job="examples.sliding_counts:build",
        sinks={OUTPUT: {"type": "files", "path": str(app.files_root)}},
        checkpoint={"path": str(app.workdir / "state" / "checkpoints")},
    )
    driver.config_path.write_text(yaml.safe_dump(driver.config))
    nothing_read = [OffsetRange(app.input_topic, p, 0, 0) for p in range(INPUT_PARTITIONS)]
    last = journal_outage(load_settings(driver.config_path), DOWN_MS, nothing_read)
    lines = make_lines(chaos_seed(), BACKLOG_LINES)
    positions, _ = Feeder.after_preloading(
        app.bootstrap, app.input_topic, [line.encode() for line in lines], len(lines), 1
    )

    driver.start()
    seconds, caught_up = time_catch_up(driver)
    app.stop(driver)
    batches = (caught_up - last) // INTERVAL_MS
    print(f"{DOWN_MS // 1000} s of down time: {batches} batches caught up in {seconds:.1f} s")

    state = app.journal_state()
    state.validate()
    assert not state.pending()
    times = sorted(state.completed)
    assert times == list(range(last, times[-1] + 1, INTERVAL_MS)), "a batch time was skipped"
    read_by = batches_read(state, dict(zip(positions, lines, strict=True)))
    check_spread(state, last)
    check_windows(app, read_by, last, times[-1], lines)


def time_catch_up(driver: Any) -> tuple[float, int]:
    """Seconds from the "recovered" log line until a completed batch is as late as the wall
    clock was then, and that batch's time."""
    deadline = time.monotonic() + CATCH_UP_TIMEOUT_S
    while not re.search(r"recovered: epoch \d+", log_text(driver)):
        assert time.monotonic() < deadline and driver.running(), driver.log_tail()
        time.sleep(0.05)
    recovered, now_ms = time.monotonic(), int(time.time() * 1000)
    status = driver.wait_for(
        lambda s: latest_completed(s) >= now_ms, CATCH_UP_TIMEOUT_S, "the catch-up"
    )
    return time.monotonic() - recovered, latest_completed(status)


def latest_completed(status: dict[str, Any]) -> int:
    done = [int(b["batch_time"]) for b in status.get("batches", []) if b["outcome"] == "completed"]
    return max(done, default=0)


def batches_read(state: Any, line_at: dict[tuple[int, int], str]) -> dict[int, Counter[str]]:
    read: dict[int, Counter[str]] = {}
    for t, record in state.planned.items():
        counts: Counter[str] = Counter()
        for r in record.ranges:
            for offset in range(r.from_offset, r.until_offset):
                counts.update(words_of(line_at[(r.partition, offset)]))
        read[t] = counts
    return read


def check_spread(state: Any, last: int) -> None:
    """The backlog went to the first down-time batches, none above the rate budget."""
    budget = RATE_PER_PARTITION * INTERVAL_MS // 1000
    reading = sorted(t for t, rec in state.planned.items() if any(r.count for r in rec.ranges))
    per_partition = -(-BACKLOG_LINES // INPUT_PARTITIONS)
    assert reading == [last + n * INTERVAL_MS for n in range(1, -(-per_partition // budget) + 1)]
    for t in reading:
        assert max(r.count for r in state.planned[t].ranges) <= budget


def check_windows(
    app: ChaosApp, read_by: dict[int, Counter[str]], first: int, last: int, lines: list[str]
) -> None:
    sink = FileSink(app.files_root)
    committed = set(sink.committed_batches(OUTPUT))
    boundaries = range(-(-(first + INTERVAL_MS) // SLIDE_MS) * SLIDE_MS, last + 1, SLIDE_MS)
    missing = [t for t in boundaries if t not in committed]
    assert not missing, f"{len(missing)} slide boundaries without a window, e.g. {missing[:5]}"
    together: Counter[str] = Counter()
    for t in boundaries:
        found = Counter(dict(sink.read_batch(OUTPUT, t)))
        expected: Counter[str] = Counter()
        for b, counts in read_by.items():
            if t - WINDOW_MS < b <= t:
                expected.update(counts)
        assert_same_totals(f"window {t}", found, +expected)
        together.update(found)
    words: Counter[str] = Counter()
    for line in lines:
        words.update(words_of(line))
    scaled = Counter({word: n * (WINDOW_MS // SLIDE_MS) for word, n in words.items()})
    assert_same_totals("all windows together", together, scaled)
