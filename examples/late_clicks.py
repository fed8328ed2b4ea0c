"""Clicks per page in 10 s event-time windows, to PostgreSQL; late clicks to the dead letters
(the event-time chaos test's job).

Input lines are `"<page> <event time ms>"` (source codec utf-8). Windows are tumbling, 10 s
long, with 2 s of slack and 10 s of allowed lateness; a click later than that goes to the
dead-letter topic (configure `dead_letter.topic`). Configure the `lines` source and a
`page_windows` sink of type postgres with `key_columns: [page, start_ms]` and
`version_column: revision`.
"""

from __future__ import annotations

from typing import Any

from service.graph.context import StreamingContext

PAGE_WINDOWS = "page_windows"
LENGTH_MS = 10_000
SLACK_MS = 2_000
LATENESS_MS = 10_000


def postgres_sink(dsn: str, table: str) -> dict[str, Any]:
    """The `page_windows` sink this job expects, as a config entry: one row per window, upserted
    on (page, start_ms), a correction replacing its row only with a higher revision."""
    return {
        "type": "postgres",
        "dsn": dsn,
        "table": table,
        "columns": ["page", "start_ms", "end_ms", "clicks", "revision"],
        "column_types": {
            "page": "text",
            "start_ms": "bigint",
            "end_ms": "bigint",
            "clicks": "bigint",
            "revision": "integer",
        },
        "key_columns": ["page", "start_ms"],
        "version_column": "revision",
    }


def parse_click(line: str) -> tuple[str, int]:
    page, event_ms = line.split()
    return (page, int(event_ms))


def event_ms(event_time: int) -> int:
    return event_time


def build(ctx: StreamingContext) -> None:
    clicks = ctx.source("lines").map(parse_click)
    windows = clicks.count_by_key_and_event_window(
        event_time=event_ms,
        length_ms=LENGTH_MS,
        slack_ms=SLACK_MS,
        allowed_lateness_ms=LATENESS_MS,
        late="dead_letter",
    )
    windows.write(PAGE_WINDOWS)
