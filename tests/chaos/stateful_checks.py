"""What the stateful app (`examples.stateful_all_sinks`) is configured with and what its sinks
must hold afterwards: shared by the stateful chaos test and the cluster tier's running total.

The totals are checked against the input (PostgreSQL holds every word's total; the last committed
Kafka record of a word is its total); each committed window file against the lines its batches
read, per the journal.
"""

from __future__ import annotations

import itertools
import os
import random
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg

from examples.stateful_all_sinks import SLIDE_MS, TOTALS_KAFKA, TOTALS_PG, WINDOW_MS, WINDOWS
from service.dev.service_process import REPO_ROOT, ServiceProcess
from service.graph.functions import words_of
from service.journal.base import JournalState
from sinks.files import FileSink
from tests.chaos.conftest import (
    INPUT_PARTITIONS,
    ChaosApp,
    Feeder,
    assert_no_open_transactions,
    assert_same_totals,
    chaos_seed,
    make_lines,
    read_topic,
    word_totals,
)
from tests.chaos.state_queries import check_answers

JOB = "examples.stateful_all_sinks:build"
MIN_ANSWERS = 20
"""Live query answers a chaos run of the running totals must check, at least."""
CHECKPOINT_EVERY = 3


def stateful_config(app: ChaosApp) -> dict[str, Any]:
    """The job's sinks and checkpoints, in the chaos app's config."""
    return {
        "job": JOB,
        "sinks": {
            # From the executors, so the executor crash points hit the Kafka writes too.
            TOTALS_KAFKA: {
                "type": "kafka",
                "topic": totals_topic(app),
                "write_from": "executors",
            },
            TOTALS_PG: {
                "type": "postgres",
                "dsn": app.dsn,
                "table": "totals",
                "columns": ["word", "n"],
                "column_types": {"word": "text", "n": "bigint"},
                "key_columns": ["word"],
            },
            WINDOWS: {"type": "files", "path": str(app.files_root)},
        },
        "checkpoint": {
            "path": str(app.workdir / "state" / "checkpoints"),
            "interval_batches": CHECKPOINT_EVERY,
        },
    }


def job_module_env(folder: Path, name: str, source: str) -> dict[str, str]:
    """The environment of a driver that runs a job module of the test's own: `name`.py holding
    `source`, written under `folder`, found through `PYTHONPATH` before the repository."""
    jobs = folder / "jobs"
    jobs.mkdir()
    (jobs / f"{name}.py").write_text(source)
    paths = (str(jobs), str(REPO_ROOT), os.environ.get("PYTHONPATH"))
    return {"PYTHONPATH": os.pathsep.join(p for p in paths if p)}


@dataclass
class TotalsRun:
    """A running-totals chaos run: its random choices, its lines (the first half in the input
    topic already, at `positions`; `feeder` streams the rest) and its drivers' environment."""

    rng: random.Random
    lines: list[str]
    positions: list[tuple[int, int]]
    feeder: Feeder
    env: dict[str, str]

    def check_totals_and_answers(
        self, app: ChaosApp, state: JournalState, answers: list[Any], unavailable: int
    ) -> dict[tuple[int, int], str]:
        """Every word's total is exact in PostgreSQL and Kafka, every batch wrote each word it
        read once, and more than `MIN_ANSWERS` live query answers, from at least two epochs,
        each equal the reference as of the batch it names; returns each line by position."""
        verify_totals(app, word_totals(self.lines))
        line_at = dict(zip(self.positions + self.feeder.positions, self.lines, strict=True))
        check_every_change_written_once(app, state, line_at)
        queries = check_answers(answers, state, batches_read(state, app.input_topic, line_at))
        print(f"{queries}; {unavailable} answered 503")
        assert queries.answers > MIN_ANSWERS, queries
        assert len(queries.epochs) >= 2, queries
        return line_at


def totals_run(app: ChaosApp, folder: Path, job: str, source: str, count: int) -> TotalsRun:
    """`count` lines half preloaded at 300 records/s per partition, and the job module `job`
    (holding `source`) on the drivers' path."""
    seed = chaos_seed()
    app.rate_per_partition = 300
    lines = make_lines(seed, count)
    encoded = [line.encode() for line in lines]
    positions, feeder = Feeder.after_preloading(
        app.bootstrap, app.input_topic, encoded, count // 2, 200
    )
    env = job_module_env(folder, job, source)
    return TotalsRun(random.Random(seed), lines, positions, feeder, env)


def check_every_change_written_once(
    app: ChaosApp, state: JournalState, line_at: dict[tuple[int, int], str]
) -> None:
    """Each batch writes the new total of every word it read, once: per word, the committed
    Kafka records are as many as the batches that read it, and rise strictly. A batch finished
    in other partitions than it began in would write some words twice and others never."""
    read = batches_read(state, app.input_topic, line_at)
    expected = Counter(word for counts in read.values() for word in counts)
    written: dict[str, list[int]] = {}
    for message in read_topic(app.bootstrap, totals_topic(app)):
        written.setdefault(message.key().decode(), []).append(int(message.value()))
    for word, values in written.items():
        assert all(a < b for a, b in itertools.pairwise(values)), (word, values)
    assert Counter({word: len(values) for word, values in written.items()}) == expected


def totals_topic(app: ChaosApp) -> str:
    return f"{app.app_id}.totals"


def verify_totals(app: ChaosApp, totals: Counter[str]) -> None:
    """PostgreSQL and Kafka hold exactly `totals`, and no transaction is left open."""
    assert_same_totals("PostgreSQL", postgres_totals(app), totals)
    assert_same_totals("Kafka (last committed value)", last_kafka_totals(app), totals)
    assert_no_open_transactions(app.bootstrap, totals_topic(app))


# --- what the sinks hold -------------------------------------------------------------------------


def postgres_totals(app: ChaosApp) -> Counter[str]:
    with psycopg.connect(app.dsn, autocommit=True) as conn:
        rows = conn.execute("SELECT word, n FROM totals").fetchall()
    return Counter({str(word): int(n) for word, n in rows})


def last_kafka_totals(app: ChaosApp) -> Counter[str]:
    """Per word, the value of its last committed record (a word's records share a partition)."""
    last: dict[str, tuple[int, int, int]] = {}
    for message in read_topic(app.bootstrap, totals_topic(app)):
        word, partition = message.key().decode(), message.partition()
        seen = last.get(word)
        assert seen is None or seen[0] == partition, (
            f"{word!r} in partitions {seen[0]}, {partition}"
        )
        if seen is None or message.offset() > seen[1]:
            last[word] = (partition, message.offset(), int(message.value()))
    return Counter({word: total for word, (_p, _o, total) in last.items()})


def check_windows(app: ChaosApp, state: JournalState, line_at: dict[tuple[int, int], str]) -> int:
    """Every committed window equals the counts of the lines its batches read (per the journal),
    and every completed boundary whose window read anything has a committed file."""
    read_by = batches_read(state, app.input_topic, line_at)
    sink = FileSink(app.files_root)
    committed = set(sink.committed_batches(WINDOWS))
    for t in sorted(committed):
        found = Counter({word: n for word, n in sink.read_batch(WINDOWS, t)})
        # Between slide boundaries a window stream writes nothing (an empty committed batch).
        expected = window_reference(read_by, t) if t % SLIDE_MS == 0 else Counter()
        assert_same_totals(f"window {t}", found, expected)
    due = {
        t
        for t in state.completed
        if t % SLIDE_MS == 0 and any(window_reference(read_by, t).values())
    }
    assert due <= committed, f"windows with input but no file: {sorted(due - committed)[:10]}"
    windows = [t for t in committed if t % SLIDE_MS == 0]
    assert len(windows) >= 5, f"only {len(windows)} windows were written"
    return len(windows)


def check_windows_whole(
    app: ChaosApp, state: JournalState, line_at: dict[tuple[int, int], str]
) -> int:
    """Windows across outages (issue 23): batch time has no hole from the first batch to the
    last, a window was committed at every slide boundary in between, and all the windows
    together count every word of the input exactly `WINDOW_MS / SLIDE_MS` times. Returns the
    number of boundaries."""
    interval = int(app.config()["batch_interval_ms"])
    first, last = min(state.planned), max(state.completed)
    holes = sorted(set(range(first, last + 1, interval)) - set(state.completed))
    assert not holes, f"{len(holes)} batch times never completed, e.g. {holes[:10]}"
    sink = FileSink(app.files_root)
    committed = set(sink.committed_batches(WINDOWS))
    boundaries = range(-(-first // SLIDE_MS) * SLIDE_MS, last + 1, SLIDE_MS)
    missing = [t for t in boundaries if t not in committed]
    assert not missing, f"{len(missing)} slide boundaries without a window, e.g. {missing[:10]}"
    together: Counter[str] = Counter()
    for t in boundaries:
        together.update(dict(sink.read_batch(WINDOWS, t)))
    words: Counter[str] = Counter()
    for line in line_at.values():
        words.update(words_of(line))
    expected = Counter({word: n * (WINDOW_MS // SLIDE_MS) for word, n in words.items()})
    assert_same_totals("all windows together", together, expected)
    return len(boundaries)


def wait_windows_closed(app: ChaosApp, driver: ServiceProcess) -> None:
    """Until every window of the last batch that read input has been computed and written."""
    state = app.journal_state()
    read = [t for t, record in state.planned.items() if any(r.count for r in record.ranges)]
    due = max(read) + WINDOW_MS

    def closed(_status: dict[str, Any]) -> bool:
        return max(app.journal_state().completed, default=0) >= due

    driver.wait_for(closed, 120, f"the windows up to batch {due}")


def batches_read(
    state: JournalState, topic: str, line_at: dict[tuple[int, int], str]
) -> dict[int, Counter[str]]:
    """Word counts of the lines each journaled batch read; the journal must hold every batch."""
    first = {
        r.partition: r.from_offset
        for t in sorted(state.planned, reverse=True)
        for r in state.planned[t].ranges
    }
    assert first == dict.fromkeys(range(INPUT_PARTITIONS), 0), (
        f"the journal no longer holds the first batches (first offsets {first}); the window "
        "reference needs every batch"
    )
    read: dict[int, Counter[str]] = {}
    for t, record in state.planned.items():
        counts: Counter[str] = Counter()
        for r in record.ranges:
            assert r.topic == topic
            for offset in range(r.from_offset, r.until_offset):
                counts.update(words_of(line_at[(r.partition, offset)]))
        read[t] = counts
    return read


def window_reference(read_by: dict[int, Counter[str]], t: int) -> Counter[str]:
    counts: Counter[str] = Counter()
    for b, batch in read_by.items():
        if t - WINDOW_MS < b <= t:
            counts.update(batch)
    return +counts
