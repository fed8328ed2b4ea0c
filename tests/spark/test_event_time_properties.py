"""Property-based golden tests of event-time windows: random out-of-order records spread over
random batches (empty ones included), through a real Spark, equal the plain-Python model of
`event_reference` batch by batch: which windows are emitted in which batch, their values and
revisions, and which records are late. Tumbling and sliding windows, with and without lateness.
"""

from __future__ import annotations

import operator
from functools import partial
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import strategies as st

from service.graph import state_functions
from service.graph.context import StreamingContext
from service.graph.event_functions import LateRecord, WindowResult
from service.testing import INTERVAL_MS, run_contexts
from sinks.memory import MemorySink
from tests.spark import event_reference as reference

# One Spark job per batch: few derandomized examples after the chosen edge cases (see
# test_state_properties.py for why shrinking is off).
EXAMPLES = settings(
    max_examples=2,
    derandomize=True,
    database=None,
    deadline=None,
    phases=[Phase.explicit, Phase.generate],
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

# A value is (event_ms, amount); event times jump back and forth by seconds.
records = st.tuples(st.sampled_from("abc"), st.tuples(st.integers(0, 12_000), st.integers(1, 3)))
batches_strategy = st.lists(
    st.one_of(st.just([]), st.lists(records, min_size=1, max_size=6)), min_size=1, max_size=7
)

# Windows of key "a": [0, 2000) emitted in batch 1, corrected in batch 2 (within the lateness),
# and a record for it in batch 4 that is late for good; "b" lands in a window nobody saw
# before but within the lateness (revision 0, emitted at once); an empty batch between.
CORRECTIONS = [
    [("a", (500, 1)), ("a", (1500, 2))],
    [("a", (3000, 1))],
    [("a", (900, 3)), ("b", (1200, 1))],
    [],
    [("c", (9000, 1))],
    [("a", (100, 1)), ("c", (9100, 2))],
]


def event_ms(value: tuple[int, int]) -> int:
    return value[0]


def add_amounts(left: tuple[int, int], right: tuple[int, int]) -> tuple[int, int]:
    return (max(left[0], right[0]), left[1] + right[1])


def tag(name: str, row: Any) -> tuple[str, Any]:
    return (name, row)


def run_graph(sc: Any, batches: list[list[Any]], options: dict[str, int]) -> dict[str, Any]:
    """Results and late records (dead-letter mode) of a reduce and a count, per batch."""
    ctx = StreamingContext(sc, "event-golden", INTERVAL_MS, 2)
    source = ctx.queue_stream(batches)
    sums = source.reduce_by_key_and_event_window(
        add_amounts, event_time=event_ms, late="dead_letter", **options
    )
    counts = source.count_by_key_and_event_window(event_time=event_ms, **options)
    streams = {"sums": sums, "late": sums.late_records(), "counts": counts}
    tagged = [stream.map(partial(tag, name)) for name, stream in streams.items()]
    sink = MemorySink()
    tagged[0].union(*tagged[1:]).write("out", sink)
    run_contexts(ctx, len(batches))
    written = sink.batches("out")
    assert len(written) == len(batches)
    found: dict[str, Any] = {
        name: [sorted((row for n, row in rows if n == name), key=repr) for rows in written]
        for name in streams
    }
    figures = counts.windowed.computation.latest_figures  # type: ignore[attr-defined]
    found["late_dropped"] = figures.late if figures is not None else 0
    return found


def expected(batches: list[list[Any]], options: dict[str, int]) -> dict[str, Any]:
    durations = (
        options["length_ms"],
        options.get("slide_ms") or options["length_ms"],
        options["slack_ms"],
        options.get("allowed_lateness_ms", 0),
    )
    sums, late = reference.run(reference.Model(event_ms, _same, add_amounts, *durations), batches)
    count_model = reference.Model(event_ms, state_functions.constant_one, operator.add, *durations)
    counts, _ = reference.run(count_model, batches)
    return {"sums": sums, "late": late, "counts": counts, "late_dropped": count_model.late_total}


def _same(value: Any) -> Any:
    return value


def check(sc: Any, batches: list[list[Any]], options: dict[str, int]) -> None:
    found = run_graph(sc, batches, options)
    want = expected(batches, options)
    as_tuples = [[tuple(r) for r in rows] for rows in found["sums"]]
    assert as_tuples == want["sums"]
    assert [[tuple(r) for r in rows] for rows in found["counts"]] == want["counts"]
    late = [[(r.key, r.value) for r in rows] for rows in found["late"]]
    assert late == want["late"]
    assert all(isinstance(r, WindowResult) for rows in found["sums"] for r in rows)
    assert all(isinstance(r, LateRecord) for rows in found["late"] for r in rows)
    assert found["late_dropped"] == want["late_dropped"]


durations = st.sampled_from([1000, 2000, 3000])
slacks = st.sampled_from([0, 500, 2000])
lateness = st.sampled_from([0, 1500, 4000])


@pytest.mark.timeout(600)
@EXAMPLES
@given(batches=batches_strategy, length_ms=durations, slack_ms=slacks)
@example(batches=CORRECTIONS, length_ms=2000, slack_ms=0)
def test_tumbling_windows_without_lateness_equal_the_model(
    sc: Any, batches: list[list[Any]], length_ms: int, slack_ms: int
) -> None:
    check(sc, batches, {"length_ms": length_ms, "slack_ms": slack_ms})


@pytest.mark.timeout(600)
@EXAMPLES
@given(batches=batches_strategy, length_ms=durations, slack_ms=slacks, lateness_ms=lateness)
@example(batches=CORRECTIONS, length_ms=2000, slack_ms=0, lateness_ms=1500)
def test_tumbling_windows_with_lateness_equal_the_model(
    sc: Any, batches: list[list[Any]], length_ms: int, slack_ms: int, lateness_ms: int
) -> None:
    options = {"length_ms": length_ms, "slack_ms": slack_ms, "allowed_lateness_ms": lateness_ms}
    check(sc, batches, options)


@pytest.mark.timeout(600)
@EXAMPLES
@given(
    batches=batches_strategy,
    slide_ms=st.sampled_from([500, 1000]),
    windows=st.sampled_from([2, 3]),
    slack_ms=slacks,
    lateness_ms=st.sampled_from([0, 1500]),
)
@example(batches=CORRECTIONS, slide_ms=1000, windows=2, slack_ms=0, lateness_ms=1500)
@example(batches=CORRECTIONS, slide_ms=1000, windows=3, slack_ms=500, lateness_ms=0)
def test_sliding_windows_equal_the_model(
    sc: Any,
    batches: list[list[Any]],
    slide_ms: int,
    windows: int,
    slack_ms: int,
    lateness_ms: int,
) -> None:
    options = {
        "length_ms": slide_ms * windows,
        "slide_ms": slide_ms,
        "slack_ms": slack_ms,
        "allowed_lateness_ms": lateness_ms,
    }
    check(sc, batches, options)


def test_the_explicit_example_has_corrections_and_late_records() -> None:
    """The hand-made example exercises what it claims to (guards the model's own use)."""
    want = expected(CORRECTIONS, {"length_ms": 2000, "slack_ms": 0, "allowed_lateness_ms": 1500})
    revisions = [r[4] for rows in want["sums"] for r in rows]
    assert 1 in revisions
    assert want["late_dropped"] >= 1
    assert any(r[0] == "b" for rows in want["sums"] for r in rows)
