"""The batch plan's value types: what a source reads in a batch, and all sources' plans."""

from __future__ import annotations

import dataclasses

import pytest

from connectors.offsets import OffsetRange
from service.graph.plan import BatchPlan, PlanError, SourcePlan

A0 = OffsetRange("a", 0, 0, 5)
A1 = OffsetRange("a", 1, 3, 3)
B0 = OffsetRange("b", 0, 7, 9)


def test_source_plan_copies_what_it_is_given() -> None:
    ranges = [A0]
    extra = {"queue:q": 1}
    plan = SourcePlan(ranges, extra)  # type: ignore[arg-type] # a list on purpose
    ranges.append(B0)
    extra["queue:q"] = 2
    assert plan.ranges == (A0,)
    assert plan.extra == {"queue:q": 1}
    assert plan == SourcePlan((A0,), {"queue:q": 1})


def test_plans_are_frozen() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        SourcePlan().ranges = (A0,)  # type: ignore[misc] # the point of the test
    with pytest.raises(dataclasses.FrozenInstanceError):
        BatchPlan(1000).batch_time = 2000  # type: ignore[misc] # the point of the test


def test_source_plan_offsets() -> None:
    assert SourcePlan((A0, A1, B0)).offsets == 7
    assert SourcePlan((A1,)).offsets == 0
    assert SourcePlan(extra={"queue:q": 0}).offsets == 0


def test_batch_plan_flat_views_keep_source_order() -> None:
    plan = BatchPlan(
        1000,
        {
            "second": SourcePlan((B0,)),
            "queue": SourcePlan(extra={"queue:queue": 4}),
            "first": SourcePlan((A0, A1)),
        },
    )
    assert plan.ranges == (B0, A0, A1)
    assert plan.extra == {"queue:queue": 4}
    assert plan.source("first") == SourcePlan((A0, A1))


def test_a_plan_without_the_source_is_refused_by_name() -> None:
    plan = BatchPlan(1000, {"lines": SourcePlan((A0,))})
    with pytest.raises(PlanError, match=r"no plan for source 'words' \(planned sources: lines\)"):
        plan.source("words")


def test_two_sources_with_one_extra_key_are_refused() -> None:
    with pytest.raises(PlanError, match="'x' and 'y' both plan extra key 'k'"):
        BatchPlan(1000, {"x": SourcePlan(extra={"k": 1}), "y": SourcePlan(extra={"k": 2})})
