"""No silent loss, without processes: the settings that choose the read policy, the counters that
carry skipped offsets to the driver, the journal record that keeps them and the lost-offsets metric.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from connectors.offsets import OffsetRange
from connectors.reader import ReadPolicy
from service.config.settings import Settings, load_settings
from service.driver.lifecycle import skipped_offsets
from service.driver.wiring import make_kafka_source
from service.graph.base import BatchOutcome
from service.graph.counters import Counts, InputRecords, SkippedOffsets
from service.graph.plan import BatchPlan
from service.journal.records import CompletedRecord, decode_bytes, encode_bytes
from service.observe.observer import make_observer

T0 = 1_700_000_000_000
BASE: dict[str, Any] = {
    "app_id": "wc",
    "job": "examples.wordcount:build",
    "kafka": {"bootstrap_servers": "127.0.0.1:1"},
    "sources": {"lines": {"topics": ["lines"]}},
}


def load(tmp_path: Path, **changes: Any) -> Settings:
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump({**BASE, **changes}))
    return load_settings(path, {})


def policy_of(settings: Settings) -> ReadPolicy:
    return make_kafka_source(settings, "lines").read_policy


def test_without_dead_letters_an_undecodable_record_fails_unless_skip_is_chosen(
    tmp_path: Path,
) -> None:
    assert policy_of(load(tmp_path)) == ReadPolicy(fail_on_decode_error=True)
    skip = {"lines": {"topics": ["lines"], "on_decode_error": "skip"}}
    assert policy_of(load(tmp_path, sources=skip)) == ReadPolicy(fail_on_decode_error=False)
    # With a dead-letter topic the failures go there, whatever the source says.
    letters = load(tmp_path, dead_letter={"topic": "dlq"})
    assert policy_of(letters) == ReadPolicy(fail_on_decode_error=False)


def test_fail_on_data_loss_reaches_the_reads_as_well_as_the_planner(tmp_path: Path) -> None:
    lossy = {"lines": {"topics": ["lines"], "fail_on_data_loss": False}}
    assert policy_of(load(tmp_path, sources=lossy)).fail_on_data_loss is False
    assert policy_of(load(tmp_path)).fail_on_data_loss is True


def test_an_unknown_decode_error_choice_is_refused(tmp_path: Path) -> None:
    with pytest.raises(Exception, match="on_decode_error"):
        load(tmp_path, sources={"lines": {"topics": ["lines"], "on_decode_error": "drop"}})


def test_skipped_runs_survive_the_counters_whatever_their_repeat_count() -> None:
    run = SkippedOffsets("lines", 3, 5, 12)
    other = SkippedOffsets("lines", 0, 0, 4)
    before: Counts = {InputRecords("lines", 3): 10}
    # Two jobs read the same source RDD: the run is reported twice and still means 7 offsets.
    after: Counts = {InputRecords("lines", 3): 20, run: 2, other: 1}
    assert run.count == 7
    assert skipped_offsets(before, after) == (
        OffsetRange("lines", 0, 0, 4),
        OffsetRange("lines", 3, 5, 12),
    )
    assert skipped_offsets(after, after) == ()


def test_the_completed_record_journals_skipped_offsets_and_reads_old_records() -> None:
    skipped = (OffsetRange("lines", 1, 0, 4), OffsetRange("lines", 0, 5, 12))
    record = CompletedRecord(2, T0, {"counts": 3}, skipped)
    again = decode_bytes(encode_bytes(record))
    assert again == record
    assert isinstance(again, CompletedRecord)
    assert again.skipped == tuple(sorted(skipped))
    plain = CompletedRecord(2, T0, {"counts": 3})
    assert "skipped" not in plain.to_json()
    assert decode_bytes(encode_bytes(plain)) == plain


def lost_samples(text: str) -> dict[tuple[str, str], float]:
    return {
        (sample.labels["topic"], sample.labels["partition"]): sample.value
        for family in text_string_to_metric_families(text)
        if family.name == "dstreams_lost_offsets"
        for sample in family.samples
        if sample.name == "dstreams_lost_offsets_total"
    }


def test_lost_offsets_are_counted_from_the_planner_and_from_replayed_reads(
    tmp_path: Path,
) -> None:
    observer = make_observer(load(tmp_path, http={"port": 0}))
    planner_totals = {("lines", 0): 5}
    observer.lost_source = lambda: dict(planner_totals)

    def finish(batch_time: int, counters: Counts) -> None:
        plan = BatchPlan(batch_time)
        observer.batch_started(plan, 0.0)
        observer.batch_finished(BatchOutcome(plan, (), 0.1, False, counters))

    finish(T0, {})
    planner_totals[("lines", 0)] = 8  # three more skipped while planning the next batch
    finish(T0 + 1000, {SkippedOffsets("lines", 1, 20, 30): 1})
    finish(T0 + 2000, {})

    text = observer.metrics.exposition().decode()
    assert lost_samples(text) == {("lines", "0"): 8.0, ("lines", "1"): 10.0}
