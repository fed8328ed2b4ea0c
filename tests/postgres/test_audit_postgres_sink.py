"""`dstreams audit --config` over a PostgreSQL output, against a real server: batches written by
the sink as the driver writes them pass, also once old markers are forgotten; a duplicated part,
a missing marker and a gap in offsets are each caught and named, with exit 1."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest
import yaml
from click.testing import CliRunner
from psycopg import sql

from connectors.offsets import OffsetRange
from service.cli.audit import audit
from service.journal.file import FileJournal
from service.journal.records import CompletedRecord, PlannedRecord
from sinks.base import BatchKey
from sinks.postgres import PostgresSink

OUTPUT = "counts"
TIMES = (1000, 2000, 3000)
TASKS = 2


@dataclass
class Job:
    app: str
    config: Path
    journal: Path
    sink: PostgresSink
    dsn: str

    def audit(self) -> Any:
        return CliRunner().invoke(audit, ["--config", str(self.config)])

    def journal_batches(self, times: tuple[int, ...] = TIMES, gap_at: int | None = None) -> None:
        """Plans and completions of `times` (10 offsets each); `gap_at`: from that batch on,
        plans start 5 offsets late."""
        with FileJournal(self.journal, owner="test") as journal:
            epoch = journal.open()
            for t in times:
                start = TIMES.index(t) * 10 + (5 if gap_at is not None and t >= gap_at else 0)
                ranges = (OffsetRange("lines", 0, start, start + 10),)
                journal.append(PlannedRecord(epoch, t, ranges, "fp"))
                rows, tasks = {OUTPUT: 2 * TASKS}, {OUTPUT: TASKS}
                journal.append(CompletedRecord(epoch, t, rows, partitions=tasks))

    def write_all(self) -> None:
        for t in TIMES:
            for p in range(TASKS):
                self.sink.write(BatchKey(self.app, OUTPUT, t, p), [(f"w{p}", t), (f"v{p}", t)])

    def execute(self, query: sql.Composable, *params: Any) -> None:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            conn.execute(query, params)


@pytest.fixture
def job(postgres_dsn: str, unique_name: str, tmp_path: Path) -> Job:
    app, table = f"audit_{unique_name}", f"t_{unique_name}"
    config = tmp_path / "job.yaml"
    sink_settings = {
        "type": "postgres",
        "dsn": postgres_dsn,
        "table": table,
        "columns": ["word", "n"],
        "column_types": {"word": "text", "n": "bigint"},
    }
    settings = {
        "app_id": app,
        "job": "examples.wordcount:build",
        "kafka": {"bootstrap_servers": "localhost:9"},  # never asked: no Kafka output
        "sinks": {OUTPUT: sink_settings},
        "journal": {"type": "file", "path": str(tmp_path / "journal")},
    }
    config.write_text(yaml.safe_dump(settings))
    types = {"word": "text", "n": "bigint"}
    sink = PostgresSink(postgres_dsn, table, columns=["word", "n"], column_types=types)
    sink.setup(app, OUTPUT)
    return Job(app, config, tmp_path / "journal", sink, postgres_dsn)


def test_batches_committed_once_pass(job: Job) -> None:
    job.write_all()
    job.journal_batches()
    result = job.audit()
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[-1] == f"  {OUTPUT} (postgres): 3 completed batches, checked"


def test_markers_the_sink_forgot_still_account_for_their_rows(job: Job) -> None:
    job.write_all()
    job.journal_batches(times=TIMES[1:])  # compacted: batch 1000 is no longer in the journal
    job.sink.forget_before(job.app, OUTPUT, 2000)  # so marker retention deleted its markers
    result = job.audit()
    assert result.exit_code == 0, result.output


def test_a_duplicated_part_is_caught(job: Job) -> None:
    job.write_all()
    job.journal_batches()
    # The rows of batch 2000's partition 1 inserted again, by a writer that bypassed the marker.
    insert = sql.SQL("INSERT INTO {} (word, n) VALUES ('w1', 2000), ('v1', 2000)")
    job.execute(insert.format(sql.Identifier(job.sink.table)))
    result = job.audit()
    assert result.exit_code == 1, result.output
    assert (
        f"VIOLATION row-count: output {OUTPUT}: table {job.sink.table} holds 14 rows, but the "
        f"markers of dstreams_batches name 12 (rows no marker names: a part written twice, or "
        "rows of another writer)"
    ) in result.output


def test_a_missing_marker_is_caught(job: Job) -> None:
    job.write_all()
    job.journal_batches()
    delete = sql.SQL(
        "DELETE FROM dstreams_batches WHERE app = %s AND output = %s AND batch_time = 3000 "
        "AND {} = 0"
    ).format(sql.Identifier("partition"))
    job.execute(delete, job.app, OUTPUT)
    result = job.audit()
    assert result.exit_code == 1, result.output
    assert (
        f"VIOLATION missing-marker: output {OUTPUT} batch 3000: partition 0 of 2 has no "
        "committed marker"
    ) in result.output


def test_a_gap_in_offsets_is_caught(job: Job) -> None:
    job.write_all()
    job.journal_batches(gap_at=2000)
    result = job.audit()
    assert result.exit_code == 1, result.output
    assert "VIOLATION gap: lines-0: offsets [10, 15) were never planned" in result.output
