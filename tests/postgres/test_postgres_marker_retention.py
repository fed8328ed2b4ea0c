"""The PostgreSQL marker table is pruned of the batches the journal has forgotten: driven through
the driver's `ForgettingJournal` on a real file journal and a real server, only this output's
markers older than the bound go; a batch after it is still recognised and skipped."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from connectors.offsets import OffsetRange
from service.driver.marker_retention import ForgettingJournal
from service.journal.file import FileJournal
from service.journal.records import CompletedRecord, PlannedRecord
from sinks.base import BatchKey
from sinks.postgres import PostgresSink

GRACE_MS = 3000
BATCHES = range(1000, 11_000, 1000)


class SinkOutput:
    """The driver's view of one output of `sink` (`service.graph.outputs.SinkOutput`)."""

    def __init__(self, sink: PostgresSink, name: str) -> None:
        self.sink, self.name = sink, name

    def forget_before(self, app: str, batch_time: int) -> None:
        self.sink.forget_before(app, self.name, batch_time)


def markers(dsn: str, table: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn) as conn:
        query = sql.SQL("SELECT app, output, batch_time, {p} FROM {m} ORDER BY 1, 2, 3, 4").format(
            p=sql.Identifier("partition"), m=sql.Identifier(table)
        )
        return conn.execute(query).fetchall()


def test_markers_of_batches_the_journal_forgot_are_deleted(
    postgres_dsn: str, unique_name: str, tmp_path: Path
) -> None:
    options: dict[str, Any] = {
        "columns": ["word", "n"],
        "column_types": {"word": "text", "n": "bigint"},
        "markers_table": f"{unique_name}_markers",
    }
    sink = PostgresSink(postgres_dsn, unique_name, **options)
    sink.setup("app", "out")
    # Another output and another app share the table; their markers are not this output's to drop.
    for app, output in (("app", "out"), ("app", "other"), ("other-app", "out")):
        for t in BATCHES:
            for partition in (0, 1):
                sink.write(BatchKey(app, output, t, partition), [(f"{output}-{t}", partition)])
    journal = ForgettingJournal(
        FileJournal(tmp_path / "journal"),
        "app",
        [SinkOutput(sink, "out")],
        prune_every=2,
        grace_ms=GRACE_MS,
    )
    journal.open()
    for t in BATCHES:
        journal.append(PlannedRecord(1, t, (OffsetRange("w", 0, t, t + 1000),), "fp"))
        journal.append(CompletedRecord(1, t, {"out": 2}))

    assert journal.forgotten == 7000  # the last completed batch, 10000, less the grace
    found = markers(postgres_dsn, options["markers_table"])
    kept = [(a, o, t, p) for t in BATCHES for a, o in [("app", "out")] for p in (0, 1) if t >= 7000]
    untouched = [
        (a, o, t, p)
        for a, o in (("app", "other"), ("other-app", "out"))
        for t in BATCHES
        for p in (0, 1)
    ]
    assert found == sorted(kept + untouched)
    # A batch after the bound is still recognised: its replay is skipped, not written twice.
    assert sink.write(BatchKey("app", "out", 7000, 1), [("again", 1)]).skipped
    sink.commit("app", "out", 10_000, 2)
    sink.close()
