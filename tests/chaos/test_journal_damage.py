"""Journal damage: a torn last record is dropped on restart; a corrupt middle record stops start-up.

The driver is made to die just before it journals `completed(t)` (crash point
`before-completed`), and half of that record's frame is then appended to the journal: exactly what
a crash in the middle of that append leaves. The restart must drop the torn bytes, replay `t`
(whose outputs the sinks already hold, so they skip) and carry on to an exact result. Then one
byte of a record in the middle of the journal is changed: the next start must refuse to run, with
an error that names the journal file and the byte offset of the damaged record.
"""

from __future__ import annotations

import re

import pytest

from service.driver.engine import EXIT_REFUSED, SPARK_UP
from service.faults import CRASH_EXIT_CODE
from service.journal.file import encode_frame, scan_frames
from service.journal.records import CompletedRecord, PlannedRecord
from tests.chaos.conftest import ChaosApp, log_text, make_lines, produce, word_totals

LINES = 12_000


@pytest.mark.timeout(400)
def test_torn_tail_is_tolerated_and_corrupt_middle_is_refused(chaos_app: ChaosApp) -> None:
    app = chaos_app
    app.rate_per_partition = 500
    lines = make_lines(31, LINES)
    produce(app.bootstrap, app.input_topic, [line.encode() for line in lines])
    driver = app.service()
    driver.start({"DSTREAMS_CRASH_AT": "before-completed", "DSTREAMS_CRASH_AFTER": "3"})
    assert driver.wait(180) == CRASH_EXIT_CODE, driver.log_tail()

    journal = app.journal_path
    data = journal.read_bytes()
    last = scan_frames(data, journal).records[-1][1]
    assert isinstance(last, PlannedRecord), f"expected the journal to end with a plan: {last}"
    frame = encode_frame(CompletedRecord(last.epoch, last.batch_time, {}))
    torn = frame[: len(frame) // 2]
    journal.write_bytes(data + torn)

    driver.start()
    app.wait_drained(driver)
    app.stop(driver)
    restart = log_text(driver).split("--- start 1 ---")[1]
    assert f"dropping a torn record of {len(torn)} bytes at byte {len(data)}" in restart
    assert "recovered: epoch 2, 1 batches replayed" in restart
    app.verify(word_totals(lines))

    data = journal.read_bytes()
    records = scan_frames(data, journal).records
    offset, record = records[len(records) // 2]
    damaged = bytearray(data)
    where = data.index(b'"batch_time":', offset) + len(b'"batch_time":')
    damaged[where] = ord("9") if data[where] != ord("9") else ord("8")
    journal.write_bytes(bytes(damaged))

    driver.start()
    code = driver.wait(180)
    refusal = log_text(driver).split("--- start 2 ---")[1]
    assert code == EXIT_REFUSED, "a driver started on a corrupt journal must not run"
    assert "Traceback" not in refusal, "a refusal is a message, not a crash"
    assert f"journal {journal} is corrupt at byte {offset}" in refusal, refusal[-3000:]
    assert re.search(r"JournalCorrupt", refusal), "the error's type should be in the log"
    assert SPARK_UP not in refusal, "the journal is checked before Spark starts"
    assert isinstance(record, PlannedRecord | CompletedRecord)
