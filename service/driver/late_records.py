"""Late records of event-time windows with `late="dead_letter"` go to the dead-letter topic.

Each event window whose late records are kept gets an output of its own,
`<stream>.late.dead-letters`, written exactly once like every dead-letter output
(docs/architecture.md, "No silent loss"). A job that asks for them without a dead-letter topic
is refused at start-up: the records would otherwise vanish.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from service.config.settings import Settings
from service.errors import ConfigError
from service.graph.context import StreamingContext
from service.graph.dstream import EventWindowView
from service.graph.outputs import DEAD_LETTER_SUFFIX

if TYPE_CHECKING:
    from service.graph.event_functions import LateRecord
    from sinks.dead_letters import DeadLetter

LATE_ERROR_TYPE = "LateRecord"


def late_windows(ctx: StreamingContext) -> list[EventWindowView]:
    """The event windows of the graph whose late records go to the dead letters."""
    return [
        stream
        for stream in ctx.streams
        if isinstance(stream, EventWindowView) and stream.params.get("late") == "dead_letter"
    ]


def add_late_record_outputs(settings: Settings, ctx: StreamingContext) -> None:
    """An exactly-once dead-letter output per event window with `late="dead_letter"`."""
    windows = late_windows(ctx)
    if not windows:
        return
    if settings.dead_letter.topic is None:
        msg = (
            f"{len(windows)} event window(s) send late records to the dead letters "
            '(late="dead_letter"), but dead_letter.topic is not set; set it, or use '
            'late="drop" to count and drop them'
        )
        raise ConfigError(msg)
    sink = settings.dead_letter.build(
        settings.kafka, local_master=settings.spark.parsed_master.is_local
    )
    for view in windows:
        letters = view.late_records().map(late_dead_letter).coalesce(1)
        letters.write(f"event-window-{view.node_id}.late{DEAD_LETTER_SUFFIX}", sink)


def late_dead_letter(late: LateRecord) -> DeadLetter:
    """A late record as a dead letter: a Kafka `SourceRecord` keeps its topic, partition,
    offset and key; any other value is written as JSON, with its key, at offset -1."""
    from connectors.reader import SourceRecord
    from sinks.dead_letters import DeadLetter

    value = late.value
    if isinstance(value, SourceRecord):
        body = value.raw if value.raw is not None else _json(value.value)
        return DeadLetter(
            value.topic,
            value.partition,
            value.offset,
            LATE_ERROR_TYPE,
            late.reason,
            value.key,
            body,
        )
    return DeadLetter("", -1, -1, LATE_ERROR_TYPE, late.reason, _json(late.key), _json(value))


def _json(value: Any) -> bytes:
    if isinstance(value, bytes):
        return value
    return json.dumps(value, separators=(",", ":"), default=str).encode()
