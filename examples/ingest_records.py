"""Ingested records to PostgreSQL, one row per record: the job the ingest chaos test runs.

The `events` source reads JSON records (`codec: json`) such as ``{"id": 17, ...}`` that clients
sent through the ingest endpoint (`dstreams ingest`); each becomes the row ``(id,)`` of the
`records_pg` output. With plain inserts (no key columns), a record written twice anywhere on the
way would show up as two rows, so counting rows per id audits the whole path exactly once.
"""

from __future__ import annotations

from typing import Any

from service.graph.context import StreamingContext

SOURCE = "events"
OUTPUT = "records_pg"


def id_row(record: Any) -> tuple[int]:
    """The row of one decoded record: its id."""
    return (int(record["id"]),)


def build(ctx: StreamingContext) -> None:
    ctx.source(SOURCE).map(id_row).write(OUTPUT)
