"""Clicks per page per minute of event time, to PostgreSQL, with corrections for late clicks.

Each click's time is its Kafka record timestamp (`event_time="kafka"`; a function of the value,
e.g. `lambda click: click["ts"]`, works as well). A minute is emitted once the watermark (the
newest click time seen minus 30 s of slack) passes its end; a click up to 2 minutes later than
that re-emits the minute with the next revision, and a later one is dropped and counted in
`dstreams_event_late_records_total`.

Configure a `clicks` source (codec json, values like {"page": "/home"}) and a `page_minutes`
sink of type postgres that keeps the highest revision per page and minute:

    sinks:
      page_minutes:
        type: postgres
        dsn: postgresql://...
        table: page_minutes
        columns: [page, start_ms, end_ms, clicks, revision]
        key_columns: [page, start_ms]
        version_column: revision
        column_types: {page: text, start_ms: bigint, end_ms: bigint, clicks: bigint,
                       revision: integer}
"""

from __future__ import annotations

from typing import Any

from service.graph.context import StreamingContext

MINUTE_MS = 60_000


def by_page(record: Any) -> tuple[str, Any]:
    """`(page, record)`: the record stays whole so that its timestamp can be read."""
    return (str(record.value.get("page", "")), record)


def build(ctx: StreamingContext) -> None:
    clicks = ctx.kafka_records("clicks").records().map(by_page)
    minutes = clicks.count_by_key_and_event_window(
        event_time="kafka",
        length_ms=MINUTE_MS,
        slack_ms=30_000,
        allowed_lateness_ms=2 * MINUTE_MS,
    )
    minutes.write("page_minutes")
