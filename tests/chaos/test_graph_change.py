"""Graph change: a restart with another partition count or output set is refused, clearly.

Replaying journaled batches through a different graph would write different data under the same
(batch, partition) keys, so recovery compares the graph's fingerprint with the journal's and stops
with `GraphChanged`, naming what changed, before it starts Spark. The two refused starts run side
by side to save time; afterwards the original configuration must still recover and finish exactly.
"""

from __future__ import annotations

import pytest

from service.driver.engine import EXIT_REFUSED, SPARK_UP
from tests.chaos.conftest import ChaosApp, log_text, make_lines, produce, word_totals

LINES = 8_000


@pytest.mark.timeout(400)
def test_restart_with_changed_partitions_or_outputs_is_refused(chaos_app: ChaosApp) -> None:
    app = chaos_app
    lines = make_lines(41, LINES)
    produce(app.bootstrap, app.input_topic, [line.encode() for line in lines])
    driver = app.service()
    driver.start()
    app.wait_completed(driver)
    assert driver.kill() == -9

    original = app.config()
    fewer_partitions = app.service("fewer-partitions", default_partitions=3)
    other_outputs = app.service(
        "other-outputs",
        job="examples.wordcount:build",
        sinks={**original["sinks"], "counts": {"type": "files", "path": str(app.workdir / "x")}},
    )
    fewer_partitions.start()
    other_outputs.start()
    for refused in (fewer_partitions, other_outputs):
        code = refused.wait(180)
        assert code == EXIT_REFUSED, (
            f"{refused.name}: a changed graph must not run\n{refused.log_tail()}"
        )
        assert "GraphChanged: the job's graph changed since the journal was written" in log_text(
            refused
        ), refused.log_tail()
        assert SPARK_UP not in log_text(refused), "the graph is checked before Spark starts"
    assert "(reduce_by_key) partitions 4 -> 3" in log_text(fewer_partitions)
    changes = log_text(other_outputs)
    for change in (
        "output 'counts_kafka' was removed",
        "output 'counts_pg' was removed",
        "output 'counts_files' was removed",
        "output 'counts' was added",
    ):
        assert change in changes, other_outputs.log_tail()

    driver.start()
    app.wait_drained(driver)
    app.stop(driver)
    app.verify(word_totals(lines))
