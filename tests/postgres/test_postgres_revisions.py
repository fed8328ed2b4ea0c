"""The PostgreSQL sink with a version column takes event-time window corrections idempotently:
one row per (key, start_ms) holding the highest revision written, whatever order they come in."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from psycopg import sql

from service.errors import SinkError
from service.graph.event_functions import WindowResult
from sinks.base import BatchKey
from sinks.postgres import PostgresSink

COLUMNS = ["key", "start_ms", "end_ms", "value", "revision"]
TYPES = {"key": "text", "start_ms": "bigint", "end_ms": "bigint", "value": "bigint"} | {
    "revision": "integer"
}


def make_sink(dsn: str, name: str) -> PostgresSink:
    sink = PostgresSink(
        dsn,
        name,
        columns=COLUMNS,
        key_columns=["key", "start_ms"],
        column_types=TYPES,
        markers_table=f"{name}_markers",
        version_column="revision",
    )
    sink.setup("app", "windows")
    return sink


def rows(dsn: str, table: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn) as conn:
        query = sql.SQL("SELECT * FROM {} ORDER BY 1, 2").format(sql.Identifier(table))
        return conn.execute(query).fetchall()


def test_the_highest_revision_wins_whatever_the_order(postgres_dsn: str, unique_name: str) -> None:
    sink = make_sink(postgres_dsn, unique_name)
    first = [WindowResult("home", 0, 60_000, 3, 0), WindowResult("cart", 0, 60_000, 1, 0)]
    sink.write(BatchKey("app", "windows", 1000, 0), first)
    sink.write(BatchKey("app", "windows", 2000, 0), [WindowResult("home", 0, 60_000, 5, 2)])
    # An older revision, written later (e.g. by another partition's batch): it must not win.
    sink.write(BatchKey("app", "windows", 3000, 0), [WindowResult("home", 0, 60_000, 4, 1)])
    assert sink.write(BatchKey("app", "windows", 2000, 0), first).skipped

    assert rows(postgres_dsn, unique_name) == [
        ("cart", 0, 60_000, 1, 0),
        ("home", 0, 60_000, 5, 2),
    ]


def test_a_version_column_needs_key_columns_and_must_not_be_one() -> None:
    with pytest.raises(SinkError, match="version_column"):
        PostgresSink("postgresql://x", "t", columns=COLUMNS, version_column="revision")
    with pytest.raises(SinkError, match="version_column"):
        PostgresSink(
            "postgresql://x", "t", columns=COLUMNS, key_columns=["key"], version_column="key"
        )
