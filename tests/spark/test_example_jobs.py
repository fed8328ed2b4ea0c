"""Every example job, run from its config (`config/wordcount.yaml`, `config/examples/*.yaml`) on
the pytest plugin's fast path: the job its config names is built, fed the config's sources, and
must write exactly the outputs the config's sinks name, with the rows the job promises.

Two examples read what the fast path cannot feed, and run as the service in other tests:
`event_time_counts` reads Kafka records with their timestamps (`ctx.kafka_records`;
tests/kafka/test_event_time_service.py) and `late_clicks` sends late clicks to the dead-letter
topic (tests/chaos/test_event_time_chaos.py).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from service.config.settings import Settings, load_settings
from service.testing.jobs import JobRun

pytestmark = [pytest.mark.spark, pytest.mark.timeout(300)]

ROOT = Path(__file__).resolve().parents[2]
LINES = [["a b a", "c"], [], ["b c c"], ["a"]]
WORDS = Counter(w for batch in LINES for line in batch for w in line.split())


def settings_of(module: str) -> Settings:
    name = "wordcount.yaml" if module == "wordcount" else f"examples/{module}.yaml"
    return load_settings(ROOT / "config" / name, environ={})


def run_example(job_runner: Callable[..., JobRun], module: str, inputs: Any) -> JobRun:
    settings = settings_of(module)
    assert set(settings.sources) == set(inputs), "the test feeds exactly the config's sources"
    run = job_runner(settings.job, inputs, batch_interval_ms=settings.batch_interval_ms)
    assert set(run.outputs) == set(settings.sinks), "the job writes exactly the config's sinks"
    return run


def totals(rows: list[Any]) -> Counter[str]:
    """Word counts summed over per-batch `(word, n)` rows."""
    found: Counter[str] = Counter()
    for word, n in rows:
        found[word] += n
    return found


def latest(rows: list[Any]) -> dict[str, int]:
    """The last value written per key: what an upserting sink holds."""
    return dict(rows)


@pytest.mark.parametrize("module", ["wordcount", "wordcount_all_sinks"])
def test_word_counts(job_runner: Callable[..., JobRun], module: str) -> None:
    run = run_example(job_runner, module, {"lines": LINES})
    for name in run.outputs:
        assert totals(run.rows(name)) == WORDS
        assert run.output(name)[1] == []  # an empty batch writes nothing


def test_slow_job_writes_every_line_as_it_is(
    job_runner: Callable[..., JobRun], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DSTREAMS_SLOW_JOB_SLEEP_MS", "0")
    run = run_example(job_runner, "slow_job", {"lines": LINES})
    assert run.output("lines_out") == [sorted(batch, key=repr) for batch in LINES]


def test_running_totals_writes_the_changed_totals(job_runner: Callable[..., JobRun]) -> None:
    run = run_example(job_runner, "running_totals", {"lines": LINES})
    assert latest(run.rows("totals")) == dict(WORDS)
    assert run.output("totals")[3] == [("a", 3)]  # only the word of the last batch changed


def test_sliding_counts_count_the_last_30_s_every_10_s(job_runner: Callable[..., JobRun]) -> None:
    # 31 batches of 1 s: the slide boundaries 0, 10 and 20 s hold the first batch, 10, 20 and
    # 30 s the others, so every line is in exactly length / slide = 3 windows.
    run = run_example(job_runner, "sliding_counts", {"lines": LINES + [[]] * 27})
    written = [batch for batch in run.output("window_counts") if batch]
    assert len(written) == 4, "a window at every slide boundary that holds a line"
    assert totals([row for batch in written for row in batch]) == Counter(
        {w: 3 * n for w, n in WORDS.items()}
    )


def test_stateful_all_sinks(job_runner: Callable[..., JobRun]) -> None:
    # 7 batches of 1 s, so that every line is in the two windows (4 s every 2 s) that hold it.
    run = run_example(job_runner, "stateful_all_sinks", {"lines": LINES + [[]] * 3})
    for name in ("totals_kafka", "totals_pg"):
        assert latest(run.rows(name)) == dict(WORDS)
    assert totals(run.rows("windows_files")) == Counter({w: 2 * n for w, n in WORDS.items()})


def test_sessions_end_on_logout(job_runner: Callable[..., JobRun]) -> None:
    events = [["ann login", "bob login"], ["ann click"], ["ann logout"]]
    run = run_example(job_runner, "sessions", {"events": events})
    ended = run.rows("sessions")
    assert len(ended) == 1 and "ann" in repr(ended[0]), ended


def test_ingested_records_become_one_row_each(job_runner: Callable[..., JobRun]) -> None:
    records = [[{"id": 1}, {"id": 2}], [{"id": 3}]]
    run = run_example(job_runner, "ingest_records", {"events": records})
    assert run.rows("records_pg") == [(1,), (2,), (3,)]
