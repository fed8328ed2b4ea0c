"""A keyed state on disk across deaths: running word totals kept with `update_state_on_disk`
(one SQLite store per partition, each batch's changes published beside the checkpoints) written
to PostgreSQL and Kafka while input streams in, through five starts of `dstreams run`:

1. dies in a batch whose outputs it wrote but did not commit (`before-sink-commit`);
2. a Python worker dies after publishing a batch's changes and before committing its store
   (`state-changes-published`): Spark's retry finds the changes and returns them; then the
   driver is SIGKILLed;
3. starts with the executors' local stores gone (a new machine) and the state's partitions
   changed from 4 to 8: every old partition is rebuilt from its durable snapshot and changes to
   finish the journaled batches, then every key moves into the 8; dies with a checkpoint
   written but not journaled (`checkpoint-files-written`);
4. starts in 4 partitions again (a second move) and is SIGKILLed at a random moment;
5. drains the input, in 4.

Then every word's total in PostgreSQL and in the last committed Kafka record is its true total,
every batch wrote each word it read exactly once to Kafka (as many records as batches that read
it, strictly rising), no batch is left pending, and every live query answered meanwhile
(`GET /state/totals/<word>`, from the local stores) equals the reference as of the batch it
names.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from examples.stateful_all_sinks import TOTALS_KAFKA, TOTALS_PG, TOTALS_QUERY, WINDOWS
from tests.chaos.conftest import (
    VOCABULARY,
    ChaosApp,
    log_text,
    wait_until,
)
from tests.chaos.state_queries import QueryPoller
from tests.chaos.stateful_checks import (
    stateful_config,
    totals_run,
)
from tests.chaos.test_state_chaos import crash_at, kill_after_a_worker_died, kill_at_random
from tests.chaos.test_state_rescale_chaos import state_partitions

LINES = 6000
QUERIED = (*VOCABULARY[::25], "never-read")
# The state's partitions at each start.
COUNTS = (4, 4, 8, 4, 4)
JOB_MODULE = f"""from functools import partial

from examples.running_totals_on_disk import add_to_total
from service.graph.functions import add, count_words


def build(ctx, partitions):
    counts = ctx.source("lines").map_partitions(count_words).reduce_by_key(add)
    totals = counts.update_state_on_disk(add_to_total, partitions, snapshot_every_batches=3)
    totals = totals.queryable({TOTALS_QUERY!r})
    totals.write({TOTALS_KAFKA!r})
    totals.write({TOTALS_PG!r})


in_4 = partial(build, partitions=4)
in_8 = partial(build, partitions=8)
"""


def disk_config(app: ChaosApp, partitions: int) -> dict[str, Any]:
    config = stateful_config(app)
    del config["sinks"][WINDOWS]
    config["checkpoint"]["local_state_dir"] = str(local_stores(app))
    return {**config, "job": f"disk_totals:in_{partitions}"}


def local_stores(app: ChaosApp) -> Path:
    return app.workdir / "state" / "local"


def lose(folder: Path) -> None:
    """Deletes `folder` as a lost disk would take it. The SIGKILLed driver's JVM and Python
    workers outlive it for a moment and may still be writing there, so until it is gone."""

    def gone() -> bool:
        shutil.rmtree(folder, ignore_errors=True)
        return not folder.exists()

    wait_until(gone, 30, f"{folder} to be deleted")


@pytest.mark.timeout(900)
def test_running_totals_on_disk_are_exact_across_deaths_and_a_lost_local_disk(
    chaos_app: ChaosApp, tmp_path: Path
) -> None:
    run = totals_run(chaos_app, tmp_path, "disk_totals", JOB_MODULE, LINES)
    app, rng, feeder = chaos_app, run.rng, run.feeder
    drivers = [
        app.service(f"driver-{n}", env=run.env, **disk_config(app, count))
        for n, count in enumerate(COUNTS)
    ]
    with QueryPoller(drivers, TOTALS_QUERY, QUERIED) as poller:
        feeder.start()
        crash_at(drivers[0], "before-sink-commit")
        kill_after_a_worker_died(app, drivers[1], "state-changes-published", rng)
        assert any(local_stores(app).rglob("*.sqlite")), "no local store was written"
        lose(local_stores(app))
        crash_at(drivers[2], "checkpoint-files-written")
        kill_at_random(app, drivers[3], rng)
        last = drivers[-1]
        last.start()
        feeder.finish()
        app.wait_drained(last, timeout_s=240.0)
    answers = poller.finish()
    app.stop(last)

    # The third start dies at its first checkpoint, which may come before its replay ends and
    # the state moves: then no batch was planned in 8 and the fourth start has nothing to move.
    planned_in = state_partitions(app.journal_state(), "update_state_on_disk")
    # The fourth start may be killed before its recovery ends; the fifth then moves the state.
    logs = "".join(log_text(driver) for driver in drivers)
    for before, after in [(4, 8), (8, 4)] if 8 in planned_in else []:
        assert f"update_state_on_disk rescaled from {before} to {after} partitions" in logs
    print(f"state partitions of the journaled batches: {sorted(planned_in)}")

    state = app.journal_state()
    state.validate()
    assert not state.pending(), "batches still pending"
    run.check_totals_and_answers(app, state, answers, poller.unavailable)
