"""Avro dead letters across a driver kill: every kind of malformed body, exactly once.

The source reads plain Avro bodies (writer schema from an `.avsc` file, no registry: a registry
in the service's own process could not be shared with this test). Among the good lines sit
records of every way a body can be malformed: cut short, trailing bytes, empty, a string that is
not UTF-8, a negative length, a varint that never ends. The driver is SIGKILLed once while it
works; afterwards each malformed record is in the dead-letter topic exactly once, with its bytes
and a DecodeError naming what is wrong, and the good lines' word totals are exact in all three
sinks. Kept short (a few thousand lines, one kill) so it fits `make test`.
"""

from __future__ import annotations

import json
import random
import time
from collections import Counter

import pytest

from connectors.avro import AvroEncoder
from tests.chaos.conftest import (
    ChaosApp,
    assert_markers_once,
    chaos_seed,
    make_lines,
    produce,
    read_topic,
    word_totals,
)

LINES = 3_000
SCHEMA = json.dumps("string")


def malformed_kinds(good: bytes) -> dict[str, tuple[bytes, str]]:
    """Each kind of malformed body, built from one good body, and a word of its reason."""
    return {
        "truncated": (good[:-3], "EOFError"),
        "trailing bytes": (good + b"\x00\x02", "bytes left after the record"),
        "empty": (b"", "EOFError"),
        "not UTF-8": (b"\x04\xff\xfe", "UnicodeDecodeError"),
        "negative length": (b"\x09abc", "Expected -5 bytes"),
        "endless varint": (b"\xff" * 11, "invalid Avro body"),
    }


@pytest.mark.timeout(300)
def test_every_malformed_avro_kind_goes_to_dead_letters_once(chaos_app: ChaosApp) -> None:
    seed = chaos_seed()
    rng = random.Random(seed)
    app = chaos_app
    app.dead_letter_topic = f"{app.app_id}.dead-letters"
    app.rate_per_partition = 250  # the input spans several batches, so the kill lands inside
    schema_file = app.workdir / "line.avsc"
    schema_file.write_text(SCHEMA)
    encode = AvroEncoder(SCHEMA)
    lines = make_lines(seed, LINES)
    values = [encode(line) for line in lines]
    kinds = malformed_kinds(values[0])
    # Each kind twice, at random places.
    slots = rng.sample(range(1, LINES), 2 * len(kinds))
    reasons: dict[int, str] = {}
    for slot, (raw, reason) in zip(slots, [*kinds.values(), *kinds.values()], strict=True):
        values[slot] = raw
        reasons[slot] = reason
    positions = produce(app.bootstrap, app.input_topic, values)
    bad = {(app.input_topic, *positions[i]): (values[i], reasons[i]) for i in reasons}
    good = [line for index, line in enumerate(lines) if index not in reasons]

    source = {
        "topics": [app.input_topic],
        "starting_offsets": "earliest",
        "max_rate_per_partition": app.rate_per_partition,
        "codec": "avro",
        "avro": {"writer_schema": str(schema_file)},
    }
    driver = app.service(sources={"lines": source})
    driver.start()
    app.wait_completed(driver)
    time.sleep(rng.uniform(0.5, 2.5))
    app.kill_and_restart(driver)
    app.wait_drained(driver)
    app.stop(driver)

    report = app.verify(word_totals(good))
    found: Counter[tuple[str, int, int]] = Counter()
    for letter in read_topic(app.bootstrap, app.dead_letter_topic):
        headers = {name: value.decode() for name, value in letter.headers() or []}
        where = (
            headers["dstreams.source.topic"],
            int(headers["dstreams.source.partition"]),
            int(headers["dstreams.source.offset"]),
        )
        found[where] += 1
        raw, reason = bad[where]
        assert (letter.value() or b"") == raw, f"dead letter {where} carries other bytes"
        assert headers["dstreams.error.type"] == "DecodeError"
        assert reason in headers["dstreams.error.message"], headers
    twice = [where for where, n in found.items() if n > 1]
    assert not twice, f"dead letters written more than once: {twice}"
    assert set(found) == set(bad), (
        f"missing from the dead letters: {sorted(set(bad) - set(found))}; "
        f"not malformed: {sorted(set(found) - set(bad))}"
    )
    markers = Counter(
        (int(m["batch_time"]), int(m["partition"]))
        for m in (
            json.loads(r.value())
            for r in read_topic(app.bootstrap, app.marker_topic("lines.dead-letters"))
        )
    )
    assert_markers_once("dead-letter marker topic", markers, report.journal_batches, 1)
