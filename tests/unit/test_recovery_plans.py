"""Recovery through the source interface: journaled plans split among sources, and every source
resumed after its own plans, whatever kind of source it is."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from connectors.offsets import OffsetRange
from service.driver.recovery import GRAPH_KEY, JournalLog, journaled_plan, restore_positions
from service.errors import JournalCorrupt
from service.graph.context import StreamingContext
from service.graph.kafka_source import KafkaSource
from service.graph.plan import BatchPlan, SourcePlan
from service.graph.sources import InputDStream, KafkaInputDStream
from service.journal.base import JournalState
from service.journal.records import EpochRecord, JournalRecord, PlannedRecord


class FakePlanner:
    """Records what the Kafka source asks of its planner."""

    def __init__(self) -> None:
        self.resumed: list[dict[tuple[str, int], int]] = []

    def resume(self, positions: Mapping[tuple[str, int], int]) -> None:
        self.resumed.append(dict(positions))


class RecordingSource(InputDStream):
    """A source of a kind recovery has never heard of: it must be resumed all the same."""

    def __init__(self, ctx: StreamingContext, name: str) -> None:
        super().__init__(ctx, name, "recording")
        self.resumed: list[list[SourcePlan]] = []

    def plan(self, batch_time: int, interval_ms: int, rate: float | None) -> SourcePlan:
        return SourcePlan(extra={f"rec:{self.name}": batch_time})

    def resume(self, journaled: Sequence[SourcePlan]) -> None:
        self.resumed.append(list(journaled))

    def plan_from_journal(
        self, ranges: Sequence[OffsetRange], extra: Mapping[str, Any]
    ) -> SourcePlan:
        return SourcePlan(extra={f"rec:{self.name}": extra[f"rec:{self.name}"]})

    def is_empty(self, plan: BatchPlan) -> bool:
        return False


class ListJournal:
    """Keeps appended records in a list."""

    def __init__(self) -> None:
        self.records: list[JournalRecord] = []

    def append(self, record: JournalRecord) -> None:
        self.records.append(record)


def graph() -> tuple[StreamingContext, FakePlanner, FakePlanner, RecordingSource]:
    ctx = StreamingContext(None, "recover", 1000)
    words, others = FakePlanner(), FakePlanner()
    KafkaInputDStream(ctx, KafkaSource("words", {}, topics=("w",)), words)
    KafkaInputDStream(ctx, KafkaSource("others", {}, pattern="o.*"), others)
    ctx.queue_stream([[1], [2], [3]], "q")
    recording = RecordingSource(ctx, "rec")
    return ctx, words, others, recording


def planned(t: int, ranges: list[OffsetRange], **extra: Any) -> PlannedRecord:
    return PlannedRecord(1, t, tuple(ranges), "fp", extra)


W0, W1, O0 = ("w", 0), ("w", 1), ("o1", 0)


def journal() -> JournalState:
    return JournalState.from_records(
        [
            EpochRecord(1, 0, "a"),
            planned(
                1000,
                [OffsetRange(*W0, 0, 5), OffsetRange(*W1, 0, 2), OffsetRange(*O0, 0, 3)],
                **{"queue:q": 0, "rec:rec": 1000, GRAPH_KEY: {"streams": []}},
            ),
            # Partition w-1 and topic o1 are not in the last plan: their positions must still
            # come from the plan before.
            planned(2000, [OffsetRange(*W0, 5, 9)], **{"queue:q": 1, "rec:rec": 2000}),
        ]
    )


def test_every_source_resumes_after_its_own_journaled_plans() -> None:
    ctx, words, others, recording = graph()
    restore_positions(journal(), ctx)
    assert words.resumed == [{W0: 9, W1: 2}]
    assert others.resumed == [{O0: 3}]
    assert recording.resumed == [
        [SourcePlan(extra={"rec:rec": 1000}), SourcePlan(extra={"rec:rec": 2000})]
    ]
    # The queue source continues with the list after the last journaled one.
    queue = ctx.inputs[2]
    assert queue.plan(3000, 1000, None) == SourcePlan(extra={"queue:q": 2})


def test_a_fresh_journal_resumes_nothing() -> None:
    ctx, words, others, recording = graph()
    restore_positions(JournalState.from_records([EpochRecord(1, 0, "a")]), ctx)
    assert words.resumed == others.resumed == []
    assert recording.resumed == []


def test_journaled_ranges_are_split_among_sources_by_ownership() -> None:
    ctx, *_ = graph()
    plan = journaled_plan(journal().planned[1000], ctx)
    assert plan.batch_time == 1000
    assert plan.sources == {
        "words": SourcePlan((OffsetRange(*W0, 0, 5), OffsetRange(*W1, 0, 2))),
        "others": SourcePlan((OffsetRange(*O0, 0, 3),)),
        "q": SourcePlan(extra={"queue:q": 0}),
        "rec": SourcePlan(extra={"rec:rec": 1000}),
    }


def test_a_plan_survives_the_journal_unchanged() -> None:
    ctx, *_ = graph()
    plan = BatchPlan(
        5000,
        {
            "words": SourcePlan((OffsetRange(*W0, 9, 12),)),
            "others": SourcePlan((OffsetRange(*O0, 3, 3), OffsetRange("o2", 0, 0, 1))),
            "q": SourcePlan(extra={"queue:q": 2}),
            "rec": SourcePlan(extra={"rec:rec": 5000}),
        },
    )
    store = ListJournal()
    log = JournalLog(store, 1, ctx.graph_json())  # type: ignore[arg-type] # only append is used
    log.journal_planned(plan, "fp")
    (record,) = store.records
    assert isinstance(record, PlannedRecord)
    # The record keeps today's format: flat ranges in source order, flat extra (plus the graph).
    assert record.ranges == plan.ranges
    assert {k: v for k, v in record.extra.items() if k != GRAPH_KEY} == plan.extra
    assert PlannedRecord.from_json(record.to_json()) == record
    assert journaled_plan(record, ctx) == plan


def test_a_journaled_plan_without_the_queue_entry_is_refused() -> None:
    ctx, *_ = graph()
    with pytest.raises(JournalCorrupt, match="no 'queue:q' entry for queue source 'q'"):
        journaled_plan(planned(1000, [], **{"rec:rec": 1}), ctx)
