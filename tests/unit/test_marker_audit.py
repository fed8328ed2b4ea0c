"""The verdict on an output's markers (`dstreams audit`): one per (batch, partition) of each
completed batch, with planted violations each caught and named."""

from __future__ import annotations

from collections import Counter

import pytest

from service.cli.marker_audit import Part, marker_violations

pytestmark = pytest.mark.unit

TASKS = {1000: 2, 2000: 2, 3000: 0}


def committed(*parts: Part) -> Counter[Part]:
    return Counter(parts)


def every_part() -> Counter[Part]:
    return committed((1000, 0), (1000, 1), (2000, 0), (2000, 1))


def test_one_marker_per_part_passes_and_an_empty_batch_needs_none() -> None:
    assert marker_violations("out", TASKS, every_part()) == ([], [])


def test_a_missing_marker_is_named() -> None:
    found = every_part()
    del found[(2000, 1)]
    [violation], notes = marker_violations("out", TASKS, found)
    assert violation.kind == "missing-marker"
    assert violation.message.startswith("output out batch 2000: partition 1 of 2 has no")
    assert notes == []


def test_a_marker_committed_twice_is_a_duplicated_part() -> None:
    found = every_part()
    found[(1000, 1)] += 1
    [violation], _ = marker_violations("out", TASKS, found)
    assert violation.kind == "duplicate-marker"
    assert "output out batch 1000 partition 1 is committed 2 times" in violation.message


def test_a_marker_beyond_the_batch_task_count_is_named() -> None:
    found = every_part() + committed((2000, 3))
    [violation], _ = marker_violations("out", TASKS, found)
    assert violation.kind == "extra-marker"
    assert "batch 2000: a marker for partition 3, but the batch had 2 tasks" in violation.message


def test_a_marker_the_sink_may_have_cleaned_up_is_counted_not_held_against_it() -> None:
    found = every_part()
    del found[(1000, 0)]
    violations, notes = marker_violations("out", TASKS, found, lambda t, p: t < 2000)
    assert violations == []
    assert notes == ["1 markers not checked: removed by the marker topic's compaction"]


def test_batches_of_an_older_journal_are_said_to_be_unchecked() -> None:
    violations, notes = marker_violations("out", {1000: None, 2000: 2}, every_part())
    assert violations == []
    assert notes == [
        "1 batches not checked: journaled by an older build that did not record their number "
        "of partitions"
    ]
