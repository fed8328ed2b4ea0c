"""The lifecycle passes one plan value down the path: planned with the engine's rate, journaled,
handed to every output, acknowledged; a replay runs the plan it is given and plans nothing."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from connectors.offsets import OffsetRange, Skipped
from service.driver.lifecycle import BatchLifecycle
from service.graph.base import OutputResult
from service.graph.context import StreamingContext
from service.graph.plan import BatchPlan, SourcePlan
from service.graph.sources import InputDStream


class RangeSource(InputDStream):
    """Plans one range per batch and records what it was asked."""

    def __init__(self, ctx: StreamingContext, name: str) -> None:
        super().__init__(ctx, name, "ranges")
        self.asked: list[tuple[int, int, float | None]] = []

    def plan(self, batch_time: int, interval_ms: int, rate: float | None) -> SourcePlan:
        self.asked.append((batch_time, interval_ms, rate))
        return SourcePlan((OffsetRange(self.name, 0, batch_time, batch_time + 1),))

    def resume(self, journaled: Sequence[SourcePlan]) -> None:
        """Nothing to resume in these tests."""

    def plan_from_journal(
        self, ranges: Sequence[OffsetRange], extra: Mapping[str, Any]
    ) -> SourcePlan:
        return SourcePlan(tuple(r for r in ranges if r.topic == self.name))

    def is_empty(self, plan: BatchPlan) -> bool:
        return False


class RecordingOutput:
    """An output that keeps the plans it ran with."""

    name = "recording"
    exactly_once = True

    def __init__(self) -> None:
        self.plans: list[BatchPlan] = []

    def describe(self) -> dict[str, Any]:
        return {"name": self.name}

    def setup(self, app: str) -> None:
        """Nothing to prepare."""

    def run(self, app: str, plan: BatchPlan) -> OutputResult:
        self.plans.append(plan)
        return OutputResult(self.name, len(plan.ranges), 0, 0)

    def commit(self, app: str, batch_time: int, result: OutputResult) -> None:
        """Nothing to commit."""


class RecordingJournal:
    def __init__(self) -> None:
        self.planned: list[BatchPlan] = []
        self.completed: list[int] = []
        self.partitions: list[dict[str, int]] = []

    def journal_planned(self, plan: BatchPlan, fingerprint: str) -> None:
        self.planned.append(plan)

    def journal_completed(
        self, batch_time: int, outputs: dict[str, int], skipped: Skipped, partitions: dict[str, int]
    ) -> None:
        self.completed.append(batch_time)
        self.partitions.append(partitions)


@dataclass
class Rig:
    batches: BatchLifecycle
    sources: list[RangeSource]
    output: RecordingOutput
    journal: RecordingJournal
    acknowledged: list[BatchPlan]


def rig() -> Rig:
    ctx = StreamingContext(None, "plans", 2000)
    sources = [RangeSource(ctx, "a"), RangeSource(ctx, "b")]
    output = RecordingOutput()
    ctx.add_output(output)
    journal = RecordingJournal()
    acknowledged: list[BatchPlan] = []
    batches = BatchLifecycle(ctx, journal, acknowledge=acknowledged.append)
    return Rig(batches, sources, output, journal, acknowledged)


def test_the_engines_rate_reaches_every_source() -> None:
    r = rig()
    r.batches.run_new(10_000, rate=12.5)
    r.batches.run_new(12_000)
    for source in r.sources:
        assert source.asked == [(10_000, 2000, 12.5), (12_000, 2000, None)]


def test_one_plan_value_is_journaled_run_acknowledged_and_reported() -> None:
    r = rig()
    outcome = r.batches.run_new(10_000)
    (plan,) = r.journal.planned
    assert plan == BatchPlan(
        10_000,
        {
            "a": SourcePlan((OffsetRange("a", 0, 10_000, 10_001),)),
            "b": SourcePlan((OffsetRange("b", 0, 10_000, 10_001),)),
        },
    )
    assert r.output.plans == [plan]
    assert r.acknowledged == [plan]
    assert outcome.plan == plan
    assert r.journal.completed == [10_000]


def test_a_replay_runs_the_given_plan_and_plans_nothing() -> None:
    r = rig()
    plan = BatchPlan(
        4000,
        {"a": SourcePlan((OffsetRange("a", 0, 3, 7),)), "b": SourcePlan()},
    )
    outcome = r.batches.replay(plan)
    assert outcome.replayed
    assert r.output.plans == [plan]
    assert [source.asked for source in r.sources] == [[], []]
    assert r.journal.planned == []
    assert r.journal.completed == [4000]
    assert r.acknowledged == [plan]


def test_every_step_of_a_new_batch_is_timed_in_order_and_commits_are_stamped() -> None:
    r = rig()
    outcome = r.batches.run_new(10_000)
    assert list(outcome.steps) == [
        "plan",
        "journal_planned",
        "run_outputs",
        "commit_sinks",
        "journal_completed",
        "checkpoint",
        "acknowledge",
    ]
    assert all(seconds >= 0 for seconds in outcome.steps.values())
    (result,) = outcome.outputs
    assert result.committed_at is not None and result.commit_seconds >= 0
    # A replay plans and journals nothing, so it has no such steps.
    replayed = r.batches.replay(outcome.plan)
    assert "plan" not in replayed.steps and "run_outputs" in replayed.steps


def test_offsets_are_acknowledged_only_when_they_moved() -> None:
    # A run of empty batches (after an outage) must not pay a broker round trip each.
    r = rig()
    replay = BatchPlan(
        10_000,
        {
            "a": SourcePlan((OffsetRange("a", 0, 5, 5),)),
            "b": SourcePlan((OffsetRange("b", 0, 7, 7),)),
        },
    )
    for _ in range(3):
        r.batches.replay(replay)
    moved = r.batches.run_new(12_000).plan
    assert r.acknowledged == [replay, moved]


def test_the_completed_record_names_each_outputs_tasks_for_the_audit() -> None:
    r = rig()
    r.batches.run_new(10_000)
    assert r.journal.partitions == [{"recording": 2}]  # a task per range of the two sources
