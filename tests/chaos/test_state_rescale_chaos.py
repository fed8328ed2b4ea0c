"""State rescaled across deaths: the stateful chaos job (`examples.stateful_all_sinks`: running
totals to PostgreSQL and Kafka, sliding windows to files) with its totals and windows in 4
partitions dies in a batch whose outputs it wrote but did not commit (the crash point
`before-sink-commit`) while input streams in; restarted with them in 8, it is SIGKILLed at a
random moment; restarted in 4, it is left to drain.

Each restart finds the journal planned under the other count: it recomputes and replays the
journaled batches in that count and moves the state into its own after them
(`service.driver.rescale`). Then every word's total in PostgreSQL and in the last committed Kafka
record is its true total, every batch wrote each word it read exactly once to Kafka (as many
records as batches that read it, strictly rising), every window file holds exactly the counts of
its batches' input, no batch is left pending, and the journal shows the totals planned in both
counts.

Throughout the run a thread asks whichever driver is up for the running totals of a sample of
words (`GET /state/totals/<word>`, `tests.chaos.state_queries`), across the deaths, restarts and
changes of partition count (which move every key to another partition). Every 200 or 404 is
kept; afterwards each must equal the reference as of the batch it names (the word's total over
the lines of the journaled batches up to and including it; 404 exactly when that is 0), name a
batch journaled completed by the answering driver's epoch or an earlier one, and the answers
must be more than `MIN_ANSWERS` from at least two epochs.
"""

from __future__ import annotations

import itertools
import os
import random
import time
from collections import Counter
from pathlib import Path

import pytest

from examples.stateful_all_sinks import TOTALS_QUERY
from service.dev.service_process import REPO_ROOT
from service.journal.base import JournalState
from tests.chaos.conftest import (
    VOCABULARY,
    ChaosApp,
    Feeder,
    chaos_seed,
    log_text,
    make_lines,
    read_topic,
    word_totals,
)
from tests.chaos.state_queries import QueryPoller, check_answers
from tests.chaos.stateful_checks import (
    batches_read,
    check_windows,
    stateful_config,
    totals_topic,
    verify_totals,
    wait_windows_closed,
)
from tests.chaos.test_state_chaos import crash_at, sigkill

LINES = 8000
# The running totals' partitions at each start; the last start drains the input.
COUNTS = (4, 8, 4)
# The words whose totals are asked for while the drivers run; the last is never in the input.
QUERIED = (*VOCABULARY[::25], "never-read")
MIN_ANSWERS = 20
# A module of the test's own: the chaos job with its totals in either count.
JOB_MODULE = """from functools import partial

from examples.stateful_all_sinks import build

in_4 = partial(build, state_partitions=4)
in_8 = partial(build, state_partitions=8)
"""


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


def state_partitions(state: JournalState, kind: str) -> set[int]:
    """The partition counts of the `kind` stream in the graphs the journal's plans were made
    with."""
    return {
        stream["params"]["partitions"]
        for record in state.planned.values()
        for stream in record.extra.get("graph", {}).get("streams", [])
        if stream["kind"] == kind
    }


@pytest.mark.timeout(900)
def test_running_totals_rescaled_from_4_to_8_and_back_across_sigkills_are_exact(
    chaos_app: ChaosApp, tmp_path: Path
) -> None:
    seed = chaos_seed()
    rng = random.Random(seed)
    app = chaos_app
    app.rate_per_partition = 300
    lines = make_lines(seed, LINES)
    positions, feeder = Feeder.after_preloading(
        app.bootstrap, app.input_topic, [line.encode() for line in lines], LINES // 2, 200
    )
    jobs = tmp_path / "jobs"
    jobs.mkdir()
    (jobs / "rescaled_totals.py").write_text(JOB_MODULE)
    paths = (str(jobs), str(REPO_ROOT), os.environ.get("PYTHONPATH"))
    path = os.pathsep.join(p for p in paths if p)
    drivers = [
        app.service(
            f"driver-{start}",
            env={"PYTHONPATH": path},
            **{**stateful_config(app), "job": f"rescaled_totals:in_{count}"},
        )
        for start, count in enumerate(COUNTS)
    ]
    with QueryPoller(drivers, TOTALS_QUERY, QUERIED) as poller:
        feeder.start()
        # Dies with a batch's outputs written but not committed: the next start must finish that
        # batch in the 4 partitions its outputs were written in, or write some words twice.
        crash_at(drivers[0], "before-sink-commit")
        drivers[1].start()
        app.wait_completed(drivers[1], 2)
        time.sleep(rng.uniform(0.0, 2.0))
        sigkill(drivers[1])
        last = drivers[-1]
        last.start()
        feeder.finish()
        app.wait_drained(last, timeout_s=240.0)
        wait_windows_closed(app, last)
    answers = poller.finish()
    app.stop(last)

    for before, driver, after in zip(COUNTS, drivers[1:], COUNTS[1:], strict=False):
        for kind in ("update_state_by_key", "reduce_by_key_and_window"):
            rescaled = f"{kind} rescaled from {before} to {after} partitions"
            assert rescaled in log_text(driver), driver.log_tail()
    state = app.journal_state()
    state.validate()
    assert not state.pending(), "batches still pending"
    assert len(state.epochs) == len(COUNTS), "every start must have opened its own epoch"
    assert state_partitions(state, "update_state_by_key") == {4, 8}
    assert state_partitions(state, "reduce_by_key_and_window") == {4, 8}
    verify_totals(app, word_totals(lines))
    line_at = dict(zip(positions + feeder.positions, lines, strict=True))
    check_every_change_written_once(app, state, line_at)
    queries = check_answers(answers, state, batches_read(state, app.input_topic, line_at))
    print(f"{queries}; {poller.unavailable} answered 503")
    assert queries.answers > MIN_ANSWERS, queries
    assert len(queries.epochs) >= 2, queries
    checked = check_windows(app, state, line_at)
    print(f"{checked} window files equal their reference")
