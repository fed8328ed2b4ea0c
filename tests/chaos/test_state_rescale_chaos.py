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

import time
from pathlib import Path

import pytest

from examples.stateful_all_sinks import TOTALS_QUERY
from service.journal.base import JournalState
from tests.chaos.conftest import (
    VOCABULARY,
    ChaosApp,
    log_text,
)
from tests.chaos.state_queries import QueryPoller
from tests.chaos.stateful_checks import (
    check_windows,
    stateful_config,
    totals_run,
    wait_windows_closed,
)
from tests.chaos.test_state_chaos import crash_at, sigkill

LINES = 8000
# The running totals' partitions at each start; the last start drains the input.
COUNTS = (4, 8, 4)
# The words whose totals are asked for while the drivers run; the last is never in the input.
QUERIED = (*VOCABULARY[::25], "never-read")
# A module of the test's own: the chaos job with its totals in either count.
JOB_MODULE = """from functools import partial

from examples.stateful_all_sinks import build

in_4 = partial(build, state_partitions=4)
in_8 = partial(build, state_partitions=8)
"""


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
    app = chaos_app
    run = totals_run(app, tmp_path, "rescaled_totals", JOB_MODULE, LINES)
    rng, feeder = run.rng, run.feeder
    drivers = [
        app.service(
            f"driver-{start}",
            env=run.env,
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
    line_at = run.check_totals_and_answers(app, state, answers, poller.unavailable)
    checked = check_windows(app, state, line_at)
    print(f"{checked} window files equal their reference")
