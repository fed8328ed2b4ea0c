"""The pytest plugin's fast path: whole jobs fed from per-batch lists on the session's Spark,
each output read back per batch, with windows and state carried from batch to batch."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from service.graph.context import StreamingContext
from service.graph.functions import add
from service.graph.state_functions import count_is_not_zero

Runner = Callable[..., Any]


def page_views(ctx: StreamingContext) -> None:
    """Stateless: the views of each page in each batch, bots left out."""
    views = ctx.source("views", parse=lambda line: line.split(","))
    humans = views.filter(lambda fields: fields[1] != "bot")
    humans.map(lambda fields: (fields[0], 1)).reduce_by_key(add).write("views_per_page")


def words_in_last_two_seconds(ctx: StreamingContext) -> None:
    """A window: per word, its count over the last two batches, every batch."""
    pairs = ctx.source("lines").flat_map(str.split).map(lambda word: (word, 1))
    windows = pairs.reduce_by_key_and_window(
        add,
        lambda total, left: total - left,
        length_ms=2000,
        slide_ms=1000,
        filter_fn=count_is_not_zero,
    )
    windows.write("recent")


def clicks_per_view(ctx: StreamingContext) -> None:
    """Two sources joined per batch: each page's clicks and views of the same batch."""
    clicks = ctx.source("clicks").map(lambda page: (page, 1)).reduce_by_key(add)
    views = ctx.source("views").map(lambda page: (page, 1)).reduce_by_key(add)
    clicks.join(views).write("clicks_and_views")


def tagged_with_batch_time(ctx: StreamingContext) -> None:
    ctx.source("events").transform(lambda rdd, t: rdd.map(lambda v: (t, v))).write("tagged")


def test_a_stateless_job_writes_each_batch_on_its_own(job_runner: Runner) -> None:
    views = [["home,alice", "home,bot", "cart,bob"], [], ["home,carol", "home,dave"]]

    run = job_runner(page_views, {"views": views})

    assert run.output("views_per_page") == [[("cart", 1), ("home", 1)], [], [("home", 2)]]


def test_a_window_spans_batches_and_empties_as_they_leave_it(job_runner: Runner) -> None:
    lines = [["a"], ["a b"], [], ["c"]]

    run = job_runner(words_in_last_two_seconds, {"lines": lines}, batches=6)

    assert run.output("recent") == [
        [("a", 1)],
        [("a", 2), ("b", 1)],
        [("a", 1), ("b", 1)],
        [("c", 1)],
        [("c", 1)],
        [],
    ]


def test_state_carries_every_total_across_batches(job_runner: Runner) -> None:
    lines = [["x y", "x"], [], ["y"], ["z x"]]

    run = job_runner("examples.running_totals:build", {"lines": lines})

    assert run.output("totals") == [
        [("x", 2), ("y", 1)],
        [],
        [("y", 2)],
        [("x", 3), ("z", 1)],
    ]


def test_two_sources_meet_batch_by_batch(job_runner: Runner) -> None:
    clicks = [["home", "home", "cart"], ["home"]]
    views = [["home", "cart", "cart"]]  # one batch only: the second batch reads none

    run = job_runner(clicks_per_view, {"clicks": clicks, "views": views})

    assert run.output("clicks_and_views") == [[("cart", (1, 2)), ("home", (2, 1))], []]


def test_batch_times_are_the_ones_asked_for(job_runner: Runner) -> None:
    run = job_runner(
        tagged_with_batch_time,
        {"events": [["a"], ["b"]]},
        batch_interval_ms=500,
        first_batch_ms=10_000,
    )

    assert run.batch_times == [10_000, 10_500]
    assert run.output("tagged") == [[(10_000, "a")], [(10_500, "b")]]
