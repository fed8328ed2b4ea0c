"""Zombie driver: a second driver on the same journal fences the first, and output stays exact.

Driver A runs; driver B is started on the same config (same journal, sinks and app id) while A
is busy. B's epoch fences A: A's next journal append fails, A logs it and exits with
`EXIT_FENCED` (3). While B recovers, A may still be writing its last batch, so both write the
same (batch, partition) keys at once; the sinks must keep one copy.
"""

from __future__ import annotations

import pytest

from service.driver.engine import EXIT_FENCED
from tests.chaos.conftest import ChaosApp, log_text, make_lines, produce, word_totals

LINES = 16_000


@pytest.mark.timeout(400)
def test_second_driver_fences_the_first_and_output_stays_exact(chaos_app: ChaosApp) -> None:
    app = chaos_app
    app.rate_per_partition = 500  # small batches: driver A is mid-batch when B takes over
    lines = make_lines(21, LINES)
    produce(app.bootstrap, app.input_topic, [line.encode() for line in lines])
    first = app.service("driver-a")
    second = app.service("driver-b")

    first.start()
    app.wait_completed(first, batches=2)
    second.start()
    code = first.wait(180)
    assert code == EXIT_FENCED, f"expected driver A to exit {EXIT_FENCED}, got {code}"
    assert "fenced out by a newer driver" in log_text(first)
    app.wait_drained(second)
    app.stop(second)

    state = app.journal_state()
    assert [e.epoch for e in state.epochs] == [1, 2]
    app.verify(word_totals(lines))
