"""The sinks' part of `dstreams audit` on a real files sink: each completed batch committed once,
and a missing marker, a missing part and a duplicated part each caught and named."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from connectors.offsets import OffsetRange
from service.cli.audit import audit
from service.cli.sink_audit import check_file_output
from service.journal.file import FileJournal
from service.journal.records import CompletedRecord, PlannedRecord
from sinks.base import BatchKey
from sinks.files import SUCCESS, FileSink

APP = "counts-app"
TIMES = (1000, 2000, 3000)
PARTITIONS = 2


@pytest.fixture
def sink(tmp_path: Path) -> FileSink:
    """Three batches of output `counts`, written and committed as the driver does."""
    sink = FileSink(tmp_path / "out")
    sink.setup(APP, "counts")
    for t in TIMES:
        for p in range(PARTITIONS):
            sink.write(BatchKey(APP, "counts", t, p), [[f"w{p}", t]])
        sink.commit(APP, "counts", t, PARTITIONS)
    return sink


def test_committed_batches_pass(sink: FileSink) -> None:
    assert check_file_output(sink, "counts", TIMES) == []


def test_an_empty_batch_committed_with_no_parts_passes(sink: FileSink) -> None:
    sink.commit(APP, "counts", 4000, 0)
    assert check_file_output(sink, "counts", [*TIMES, 4000]) == []


def test_a_missing_success_marker_is_caught(sink: FileSink) -> None:
    marker = sink.batch_dir("counts", 2000) / SUCCESS
    marker.unlink()
    [violation] = check_file_output(sink, "counts", TIMES)
    assert violation.kind == "uncommitted"
    assert violation.message == (
        f"output counts batch 2000 is journaled as completed, but {marker} is missing"
    )


def test_a_missing_part_is_caught(sink: FileSink) -> None:
    (sink.batch_dir("counts", 3000) / "part-00001.jsonl").unlink()
    [violation] = check_file_output(sink, "counts", TIMES)
    assert violation.kind == "missing-part"
    assert violation.message == "output counts batch 3000: part-00001.jsonl of 2 is missing"


def test_a_duplicated_part_is_caught(sink: FileSink) -> None:
    folder = sink.batch_dir("counts", 1000)
    shutil.copy(folder / "part-00000.jsonl", folder / "part-00002.jsonl")
    [violation] = check_file_output(sink, "counts", TIMES)
    assert violation.kind == "extra-part"
    assert "part-00002.jsonl is not one of the 2 parts its _SUCCESS names" in violation.message


def test_a_batch_the_journal_completed_that_the_sink_never_saw_is_caught(sink: FileSink) -> None:
    violations = check_file_output(sink, "counts", [*TIMES, 5000])
    assert [v.kind for v in violations] == ["uncommitted"]
    assert "output counts batch 5000 is journaled as completed" in violations[0].message


def test_a_success_marker_naming_other_parts_than_the_journal_is_caught(sink: FileSink) -> None:
    tasks = {1000: PARTITIONS, 2000: PARTITIONS + 1, 3000: None}  # 3000: an older journal
    [violation] = check_file_output(sink, "counts", TIMES, tasks)
    assert violation.kind == "partitions-mismatch"
    assert violation.message.endswith("names 2 parts, the journal 3")


# --- `dstreams audit --config` over the journal and the files sink ----------------------------


def job(tmp_path: Path, sink: FileSink) -> Path:
    journal_path = tmp_path / "journal"
    with FileJournal(journal_path, owner="test") as journal:
        epoch = journal.open()
        for i, t in enumerate(TIMES):
            ranges = (OffsetRange("words", 0, i * 10, i * 10 + 10),)
            journal.append(PlannedRecord(epoch, t, ranges, "fp"))
            journal.append(CompletedRecord(epoch, t, {"counts": PARTITIONS}))
    config = tmp_path / "job.yaml"
    settings = {
        "app_id": APP,
        "job": "examples.wordcount:build",
        "kafka": {"bootstrap_servers": "localhost:9092"},
        "sinks": {"counts": {"type": "files", "path": sink.root}},
        "journal": {"type": "file", "path": str(journal_path)},
    }
    config.write_text(yaml.safe_dump(settings))
    return config


def test_cli_audit_checks_the_files_output_of_every_completed_batch(
    tmp_path: Path, sink: FileSink
) -> None:
    config = job(tmp_path, sink)
    result = CliRunner().invoke(audit, ["--config", str(config)])
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[-2:] == [
        "outputs:",
        "  counts (files): 3 completed batches, checked",
    ]

    (sink.batch_dir("counts", 2000) / SUCCESS).unlink()
    failed = CliRunner().invoke(audit, ["--config", str(config)])
    assert failed.exit_code == 1
    assert "VIOLATION uncommitted: output counts batch 2000 is journaled" in failed.output
    assert failed.output.splitlines()[-1].endswith(": 1 violations of exactly-once")
