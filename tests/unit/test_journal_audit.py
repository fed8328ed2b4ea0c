"""The journal's part of `dstreams audit`: every input offset planned exactly once, with planted
gaps, overlaps, re-plans and losses caught and named."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st

from connectors.offsets import OffsetRange
from service.cli.audit import audit
from service.journal.audit import JournalAudit, PartitionCoverage, audit_journal
from service.journal.base import JournalState
from service.journal.file import FileJournal
from service.journal.records import (
    CompletedRecord,
    EpochRecord,
    JournalRecord,
    PlannedRecord,
)


def planned(t: int, *ranges: tuple[int, int, int], epoch: int = 1) -> PlannedRecord:
    """Batch `t` planning (partition, from, until) of topic `words`."""
    return PlannedRecord(epoch, t, tuple(OffsetRange("words", *r) for r in ranges), "fp")


def done(t: int, *skipped: tuple[int, int, int], epoch: int = 1) -> CompletedRecord:
    return CompletedRecord(epoch, t, {"out": 1}, tuple(OffsetRange("words", *r) for r in skipped))


def audited(*records: JournalRecord) -> JournalAudit:
    return audit_journal(JournalState.from_records([EpochRecord(1, 0, "test"), *records]))


def healthy() -> list[JournalRecord]:
    return [
        planned(1000, (0, 0, 10), (1, 0, 5)),
        done(1000),
        planned(2000, (0, 10, 20), (1, 5, 5)),
        done(2000),
        planned(3000, (0, 20, 30), (1, 5, 9)),
        done(3000),
    ]


def test_contiguous_batches_pass_and_show_what_each_partition_covered() -> None:
    result = audit_journal(JournalState.from_records(healthy()))
    assert result.ok
    assert result.partitions == (
        PartitionCoverage("words", 0, 0, 30, 3),
        PartitionCoverage("words", 1, 0, 9, 3),
    )
    assert result.planned == result.completed == (1000, 2000, 3000)
    assert result.pending == ()


def test_a_gap_is_caught_and_names_the_offsets_never_planned() -> None:
    records = healthy()
    records[4] = planned(3000, (0, 25, 30), (1, 5, 9))
    result = audit_journal(JournalState.from_records(records))
    assert [v.kind for v in result.violations] == ["gap"]
    assert result.violations[0].message == (
        "words-0: offsets [20, 25) were never planned (5 offsets): batch 2000 ended at 20, "
        "batch 3000 started at 25"
    )


def test_an_overlap_is_caught_and_names_both_batches() -> None:
    records = healthy()
    records[2] = planned(2000, (0, 7, 20), (1, 5, 5))
    result = audit_journal(JournalState.from_records(records))
    assert [v.kind for v in result.violations] == ["overlap"]
    assert result.violations[0].message == (
        "words-0: offsets [7, 10) were planned twice, by batch 1000 (until 10) and by batch "
        "2000 (from 7)"
    )


def test_every_violation_is_reported_not_only_the_first() -> None:
    records = healthy()
    records[2] = planned(2000, (0, 12, 20), (1, 3, 5))
    records.append(done(4000))
    result = audit_journal(JournalState.from_records(records))
    assert sorted(v.kind for v in result.violations) == ["gap", "overlap", "unplanned"]
    assert not result.ok


def test_two_ranges_of_one_partition_in_one_batch_must_not_overlap() -> None:
    result = audited(planned(1000, (0, 0, 10), (0, 5, 12)))
    assert [v.kind for v in result.violations] == ["overlap"]


def test_a_batch_replanned_with_other_offsets_is_caught() -> None:
    records = [*healthy()[:4], planned(2000, (0, 10, 21), (1, 5, 5), epoch=2)]
    result = audit_journal(JournalState.from_records(records))
    kinds = [v.kind for v in result.violations]
    assert "replanned" in kinds
    replanned = next(v for v in result.violations if v.kind == "replanned")
    assert "planned by epoch 1 as {words-0[10,20), words-1[5,5)}" in replanned.message
    assert "again by epoch 2 as {words-0[10,21), words-1[5,5)}" in replanned.message


def test_a_recovering_driver_replanning_the_same_offsets_is_fine() -> None:
    records = [*healthy()[:5], planned(3000, (0, 20, 30), (1, 5, 9), epoch=2), done(3000, epoch=2)]
    assert audit_journal(JournalState.from_records(records)).ok


def test_offsets_lost_to_retention_are_counted_not_violations() -> None:
    records = healthy()
    records[3] = done(2000, (0, 10, 14))
    result = audit_journal(JournalState.from_records(records))
    assert result.ok
    assert result.partitions[0].lost == 4
    assert result.partitions[1].lost == 0


def test_a_loss_outside_the_batchs_plan_is_a_violation() -> None:
    records = healthy()
    records[3] = done(2000, (0, 30, 34))
    result = audit_journal(JournalState.from_records(records))
    assert [v.kind for v in result.violations] == ["skipped-unplanned"]
    assert "batch 2000 records {words-0[30,34)} as deleted" in result.violations[0].message


def test_a_pending_batch_is_reported_and_is_no_violation() -> None:
    result = audit_journal(JournalState.from_records(healthy()[:5]))
    assert result.ok
    assert result.pending == (3000,)


def test_an_empty_journal_passes_with_nothing_covered() -> None:
    result = audited()
    assert result.ok and result.partitions == ()


@given(
    sizes=st.lists(st.integers(min_value=0, max_value=50), min_size=3, max_size=12),
    data=st.data(),
)
def test_dropping_any_middle_batch_leaves_exactly_its_offsets_as_a_gap(
    sizes: list[int], data: st.DataObject
) -> None:
    starts = [sum(sizes[:i]) for i in range(len(sizes))]
    records: list[JournalRecord] = []
    for i, (start, size) in enumerate(zip(starts, sizes, strict=True)):
        records += [planned(1000 * (i + 1), (0, start, start + size)), done(1000 * (i + 1))]
    whole = audit_journal(JournalState.from_records(records))
    assert whole.ok
    assert whole.partitions == (PartitionCoverage("words", 0, 0, sum(sizes), len(sizes)),)

    dropped = data.draw(st.integers(min_value=1, max_value=len(sizes) - 2), label="dropped")
    kept = records[: 2 * dropped] + records[2 * dropped + 2 :]
    result = audit_journal(JournalState.from_records(kept))
    if sizes[dropped] == 0:
        assert result.ok  # an empty batch covered nothing, so nothing is missing without it
    else:
        assert [v.kind for v in result.violations] == ["gap"]
        assert f"({sizes[dropped]} offsets)" in result.violations[0].message


# --- `dstreams audit` on a file journal -------------------------------------------------------


def write_journal(path: Path, records: list[JournalRecord]) -> None:
    with FileJournal(path, owner="test") as journal:
        journal.open()
        for record in records:
            journal.append(record)


def test_cli_audit_prints_the_coverage_and_passes(tmp_path: Path) -> None:
    path = tmp_path / "journal"
    write_journal(path, healthy())
    config = tmp_path / "job.yaml"
    config.write_text(
        "app_id: counts\njob: examples.wordcount:build\n"
        "kafka: {bootstrap_servers: 'localhost:9092'}\n"
        f"journal: {{type: file, path: '{path}'}}\n"
    )
    result = CliRunner().invoke(audit, ["--config", str(config)])
    assert result.exit_code == 0, result.output
    assert result.output.splitlines() == [
        f"journal:    file {path}",
        "batches:    3 planned (1000 .. 3000), 3 completed",
        "pending:    none",
        "  words-0: offsets [0, 30) in 3 batches, 0 lost to retention",
        "  words-1: offsets [0, 9) in 3 batches, 0 lost to retention",
        "input offsets: each planned exactly once",
        "outputs:",
        "  out (unconfigured): 3 completed batches, not checked by this version",
    ]


def test_cli_audit_names_each_violation_and_exits_1(tmp_path: Path) -> None:
    path = tmp_path / "journal"
    records = healthy()
    records[2] = planned(2000, (0, 12, 20), (1, 3, 5))
    write_journal(path, records)
    result = CliRunner().invoke(audit, ["--file", str(path)])
    assert result.exit_code == 1
    lines = result.output.splitlines()
    assert "VIOLATION gap: words-0: offsets [10, 12) were never planned" in "\n".join(lines)
    assert "VIOLATION overlap: words-1: offsets [3, 5) were planned twice" in "\n".join(lines)
    assert "input offsets: FAILED" in lines
    assert "outputs: not checked (give --config, which names the sinks)" in lines
    assert lines[-1] == f"Error: file {path}: 2 violations of exactly-once"
