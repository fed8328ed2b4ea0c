"""The PostgreSQL sink's part of `dstreams audit` (see `service.cli.sink_audit`).

The marker table's primary key `(app, output, batch_time, partition)` already forbids a second
marker; what can go wrong is a marker missing for a completed batch (its rows never committed, or
deleted), a marker beyond the batch's task count, or rows without a marker (a part written twice,
or rows written by something else). The last is found by counting: with plain inserts the table
holds exactly the rows its markers count, including the markers `forget_before` deleted (their
counts are kept in its tally table). With upserts (`key_columns`) rows replace each other, and a
table shared with other outputs holds theirs too, so the count is not held then.
"""

from __future__ import annotations

from collections import Counter

from service.cli.marker_audit import OutputCheck, Tasks, marker_violations
from service.journal.audit import Violation
from sinks.postgres import PostgresSink


def check_postgres_output(
    app: str, output: str, sink: PostgresSink, tasks: Tasks, sharing: list[str]
) -> OutputCheck:
    """The marker table against the journal's completed batches, and the table's row count
    unless other outputs (`sharing`) write the same table."""
    tally = sink.audit_markers(app, output)
    found = Counter((t, p) for t, p, _ in tally.markers)
    violations, notes = marker_violations(output, tasks, found)
    if sink.key_columns:
        notes.append(f"rows of {sink.table} not counted: upserts (key_columns) replace rows")
    elif sharing:
        notes.append(f"rows of {sink.table} not counted: outputs {sharing} write it too")
    else:
        marked = sum(n for _, _, n in tally.markers) + tally.forgotten_rows
        violations += _row_count(output, sink, marked)
    return OutputCheck(output, "postgres", True, len(tasks), tuple(violations), tuple(notes))


def _row_count(output: str, sink: PostgresSink, marked: int) -> list[Violation]:
    rows = sink.count_rows()
    if rows == marked:
        return []
    cause = (
        "rows no marker names: a part written twice, or rows of another writer"
        if rows > marked
        else "rows deleted after they were committed"
    )
    what = (
        f"output {output}: table {sink.table} holds {rows} rows, but the markers of "
        f"{sink.markers_table} name {marked} ({cause})"
    )
    return [Violation("row-count", what)]
