"""The task layout dstreams chooses where a job left it unsized: shuffles follow the batch's
journaled layout, explicit sizes and stateful operators do not, and a replay reads the layout
from the journal rather than choosing again (service.graph.layout)."""

from __future__ import annotations

import operator
from pathlib import Path
from typing import Any

from service.driver.lifecycle import BatchLifecycle
from service.driver.recovery import JournalLog, journaled_plan
from service.graph import functions
from service.graph.context import StreamingContext
from service.graph.layout import FIXED_DEFAULT_PARTITIONS, TaskLayout
from service.graph.plan import BatchPlan
from service.journal.base import JournalState
from service.journal.file import FileJournal
from sinks.memory import MemorySink

WORDS = [["a b c d e f"] * 20, [], ["x"]]


def word_graph(sc: Any, default_partitions: int | None) -> tuple[StreamingContext, dict[str, Any]]:
    """Words counted three ways: a reduce and a join the job left unsized, and a window."""
    ctx = StreamingContext(sc, "layout", 1000, default_partitions)
    pairs = ctx.queue_stream(WORDS).flat_map(str.split).map(functions.pair_with_one)
    counts = pairs.reduce_by_key(operator.add)
    joined = counts.join(pairs)
    windowed = pairs.reduce_by_key_and_window(operator.add, length_ms=2000)
    for name, stream in (("counts", counts), ("joined", joined), ("windowed", windowed)):
        stream.write(name, MemorySink())
    return ctx, {"counts": counts, "joined": joined, "windowed": windowed}


def plan_with(ctx: StreamingContext, batch_time: int, layout: TaskLayout | None) -> BatchPlan:
    sources = {s.name: s.plan(batch_time, ctx.batch_interval_ms, None) for s in ctx.inputs}
    return BatchPlan(batch_time, sources, layout)


def test_unsized_shuffles_take_the_plans_layout_and_stateful_ones_a_fixed_count(sc: Any) -> None:
    ctx, streams = word_graph(sc, None)
    plan = plan_with(ctx, 1000, TaskLayout(3))
    assert streams["counts"].rdd_at(plan).getNumPartitions() == 3
    assert streams["joined"].rdd_at(plan).getNumPartitions() == 3
    assert streams["windowed"].rdd_at(plan).getNumPartitions() == FIXED_DEFAULT_PARTITIONS
    # A plan journaled before layouts were: what unset default_partitions meant then.
    legacy = plan_with(ctx, 2000, None)
    assert streams["counts"].rdd_at(legacy).getNumPartitions() == FIXED_DEFAULT_PARTITIONS


def test_a_job_that_sets_default_partitions_gets_no_layout(sc: Any) -> None:
    ctx, streams = word_graph(sc, 2)
    assert not ctx.auto_layout
    assert BatchLifecycle(ctx, journal=None).plan(1000).layout is None
    plan = plan_with(ctx, 1000, TaskLayout(3))  # even a layout in the plan changes nothing
    assert streams["counts"].rdd_at(plan).getNumPartitions() == 2
    assert "auto" not in ctx.graph_json()


def test_the_layout_is_journaled_and_a_replay_takes_it_from_the_journal(
    sc: Any, tmp_path: Path
) -> None:
    ctx, _ = word_graph(sc, None)
    assert '"partitions": "auto"' in ctx.graph_json()
    journal = FileJournal(tmp_path / "journal")
    lifecycle = BatchLifecycle(ctx, JournalLog(journal, journal.open(), ctx.graph_json()))
    plan = lifecycle.plan(1000)
    # 120 queued lines are no offsets: one task, however many cores Spark offers.
    assert plan.layout == TaskLayout(1)
    lifecycle.journal_planned(BatchPlan(plan.batch_time, plan.sources, TaskLayout(5)))
    journal.close()
    record = JournalState.from_records(FileJournal(tmp_path / "journal").read()).planned[1000]
    assert journaled_plan(record, ctx).layout == TaskLayout(5)
    assert "layout" not in journaled_plan(record, ctx).extra  # not mistaken for a source's


def keyed_three_ways(sc: Any, default_partitions: int | None) -> tuple[StreamingContext, list[Any]]:
    ctx = StreamingContext(sc, "layout", 1000, default_partitions)
    words = ctx.queue_stream(WORDS).flat_map(str.split)
    pairs = words.map(functions.pair_with_one).coalesce(1)
    streams = [
        pairs.reduce_by_key(operator.add),
        pairs.group_by_key(),
        pairs.combine_by_key(str, lambda text, one: text + str(one), operator.add),
    ]
    return ctx, streams


def test_a_one_task_layout_over_one_partition_computes_the_same_rows_without_a_shuffle(
    sc: Any,
) -> None:
    auto, combined = keyed_three_ways(sc, None)
    fixed, shuffled = keyed_three_ways(sc, 2)
    one_task, fixed_plan = plan_with(auto, 1000, TaskLayout(1)), plan_with(fixed, 1000, None)
    for left, right in zip(combined, shuffled, strict=True):
        mine, theirs = left.rdd_at(one_task), right.rdd_at(fixed_plan)
        assert b"ShuffledRDD" not in mine.toDebugString()
        assert b"ShuffledRDD" in theirs.toDebugString()
        assert mine.getNumPartitions() == 1
        assert sorted(mine.collect()) == sorted(theirs.collect())
    # Two tasks in the layout: the shuffle again.
    auto_two, combined_two = keyed_three_ways(sc, None)
    assert (
        b"ShuffledRDD"
        in combined_two[0].rdd_at(plan_with(auto_two, 1000, TaskLayout(2))).toDebugString()
    )
