"""Dead letters across driver kills: every malformed record, and only those, exactly once.

The source uses the JSON codec; 1% of the input (20,000 lines, 3 kills; 10,000 and 2 in
`make test`) is not JSON. Those records must land in the
dead-letter topic once each (identified by the source topic/partition/offset headers, with their
original bytes), however often the driver is killed, while the good records' word totals stay
exact in all three sinks. The dead-letter output has its own markers
(`dstreams.markers.<app>.lines.dead-letters`, one partition), checked like the Kafka sink's.
"""

from __future__ import annotations

import json
import random
import time
from collections import Counter

import pytest

from tests.chaos.conftest import (
    ChaosApp,
    assert_markers_once,
    assert_no_open_transactions,
    chaos_seed,
    make_lines,
    produce,
    read_topic,
    word_totals,
)
from tests.soak import sized

LINES = sized(10_000, 20_000)
KILLS = sized(2, 3)


@pytest.mark.timeout(500)
def test_malformed_records_go_to_dead_letters_exactly_once(chaos_app: ChaosApp) -> None:
    seed = chaos_seed()
    rng = random.Random(seed)
    app = chaos_app
    app.codec = "json"
    app.dead_letter_topic = f"{app.app_id}.dead-letters"
    lines = make_lines(seed, LINES)
    malformed_at = set(rng.sample(range(LINES), LINES // 100))
    values = [
        f'{{"broken": {index}'.encode() if index in malformed_at else json.dumps(line).encode()
        for index, line in enumerate(lines)
    ]
    positions = produce(app.bootstrap, app.input_topic, values)
    bad = {(app.input_topic, *positions[i]): values[i] for i in malformed_at}
    good = [line for index, line in enumerate(lines) if index not in malformed_at]

    driver = app.service()
    driver.start()
    app.wait_completed(driver)
    for _ in range(KILLS):
        time.sleep(rng.uniform(1.0, 6.0))
        app.kill_and_restart(driver)
    app.wait_drained(driver)
    app.stop(driver)

    report = app.verify(word_totals(good))
    letters = read_topic(app.bootstrap, app.dead_letter_topic)
    found: Counter[tuple[str, int, int]] = Counter()
    for letter in letters:
        headers = {name: value.decode() for name, value in letter.headers() or []}
        where = (
            headers["dstreams.source.topic"],
            int(headers["dstreams.source.partition"]),
            int(headers["dstreams.source.offset"]),
        )
        found[where] += 1
        assert letter.value() == bad.get(where), f"dead letter {where} carries other bytes"
        assert headers["dstreams.error.type"] == "DecodeError"
    twice = [where for where, n in found.items() if n > 1]
    assert not twice, f"dead letters written more than once: {twice[:10]}"
    assert set(found) == set(bad), (
        f"{len(set(bad) - set(found))} malformed records missing from the dead letters, "
        f"{len(set(found) - set(bad))} dead letters that were not malformed"
    )

    output = "lines.dead-letters"
    marker_topic = app.marker_topic(output)
    markers = Counter(
        (int(m["batch_time"]), int(m["partition"]))
        for m in (json.loads(r.value()) for r in read_topic(app.bootstrap, marker_topic))
    )
    assert_markers_once("dead-letter marker topic", markers, report.journal_batches, 1)
    for topic in (app.dead_letter_topic, marker_topic):
        assert_no_open_transactions(app.bootstrap, topic)
