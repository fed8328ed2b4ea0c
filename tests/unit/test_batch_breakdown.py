"""Where a batch's time went, as the observer hands it to `/status` and to Prometheus."""

from __future__ import annotations

import time

from prometheus_client.parser import text_string_to_metric_families

from connectors.offsets import OffsetRange
from service.graph.base import BatchOutcome, OutputResult
from service.graph.counters import EarliestTimestamp, InputRecords, LatestTimestamp
from service.graph.jobs import SparkJob
from service.graph.plan import BatchPlan, SourcePlan
from service.observe.metrics import Metrics
from service.observe.observer import Observer, batch_breakdown
from service.observe.status import StatusBoard

COMMITTED_AT = 1_700_000_010.0


def outcome() -> BatchOutcome:
    plan = BatchPlan(1_700_000_009_000, {"s": SourcePlan((OffsetRange("words", 0, 0, 10),))})
    counts = OutputResult(
        "counts",
        partitions=2,
        rows=5,
        skipped_partitions=0,
        seconds=0.6,
        jobs=(SparkJob(7, 2, 4, 0.35), SparkJob(8, 1, 2, 0.15)),
        write_seconds=0.08,
        commit_seconds=0.01,
        committed_at=COMMITTED_AT,
    )
    empty = OutputResult("empty", 0, 0, 0)
    counters = {
        InputRecords("words", 0): 10,
        EarliestTimestamp("words", 0): 1_700_000_008_500,
        LatestTimestamp("words", 0): 1_700_000_009_400,
    }
    steps = {"plan": 0.002, "journal_planned": 0.004, "run_outputs": 0.61}
    return BatchOutcome(plan, (counts, empty), 0.7, False, counters, steps)


def test_the_breakdown_names_each_step_job_write_commit_and_latency() -> None:
    breakdown = batch_breakdown(outcome())
    assert breakdown["steps"] == {"plan": 0.002, "journal_planned": 0.004, "run_outputs": 0.61}
    counts = breakdown["outputs"]["counts"]
    assert [job["job_id"] for job in counts["jobs"]] == [7, 8]
    assert counts["write_s"] == 0.08 and counts["commit_s"] == 0.01
    # Newest record 1_700_000_009.4 and oldest 1_700_000_008.5, committed at ..._010.0.
    assert counts["end_to_end_s"] == {"min": 0.6, "max": 1.5}
    assert breakdown["outputs"]["empty"]["end_to_end_s"] is None


def test_the_observer_publishes_steps_and_latency() -> None:
    metrics = Metrics(process_metrics=False)
    board = StatusBoard("wc", 1000)
    Observer("wc", 1000, metrics, board, None, None).batch_finished(outcome())
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(metrics.exposition().decode())
        for s in family.samples
    }
    step = "dstreams_batch_step_seconds_count"
    assert samples[(step, (("step", "spark_job"),))] == 2
    assert samples[(step, (("step", "sink_write"),))] == 1  # the empty output wrote nothing
    assert samples[(step, (("step", "plan"),))] == 1
    assert samples[("dstreams_end_to_end_latency_seconds_sum", (("output", "counts"),))] == 1.5
    assert ("dstreams_end_to_end_latency_seconds_count", (("output", "empty"),)) not in samples
    (batch,) = board.snapshot()["batches"]
    assert batch["end_to_end_s"] == {"min": 0.6, "max": 1.5}


def test_the_lag_is_read_after_each_batch_on_time_and_once_a_second_while_late() -> None:
    # The down-time batches after an outage run back to back: one broker round trip for the
    # lag each would be most of their cost.
    observer = Observer(
        "wc", 1000, Metrics(process_metrics=False), StatusBoard("wc", 1000), None, None
    )
    reads: list[float] = []

    def lag() -> dict[tuple[str, int], int]:
        reads.append(time.monotonic())
        return {("words", 0): 0}

    observer.lag_source = lag
    late = outcome()
    on_time = BatchOutcome(
        BatchPlan(late.plan.batch_time + 1000, late.plan.sources), (), 0.01, False
    )
    observer.batch_started(late.plan, 3600.0)
    observer.batch_finished(late)
    for n in range(1, 4):
        later = BatchPlan(late.plan.batch_time - n * 1000, late.plan.sources)
        observer.batch_started(later, 3600.0 - n)
        observer.batch_finished(BatchOutcome(later, (), 0.01, False))
    assert len(reads) == 1
    observer.batch_started(on_time.plan, 0.0)
    observer.batch_finished(on_time)
    assert len(reads) == 2
