"""Dead letters: input records that failed to decode, or whose user function raised.

A `DeadLetterSink` is a `KafkaSink` whose rows are `DeadLetter` values, so dead letters go through
the same marker protocol as any output: one transaction per (app, output, batch, partition), skipped
when already committed, and a replay never writes a dead letter twice. Give the dead-letter output
its own output name (e.g. ``"<output>.dead-letters"``); it then has its own markers.

Each record carries the original key and value bytes and these headers (UTF-8 text):
``dstreams.source.topic``, ``dstreams.source.partition``, ``dstreams.source.offset``,
``dstreams.error.type``, ``dstreams.error.message``, ``dstreams.batch.time`` (milliseconds).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sinks.base import BatchKey
from sinks.kafka import KafkaSink, OutboundRecord

HEADER_PREFIX = "dstreams."
# Headers travel with every record and end up in logs and UIs; a traceback-sized message would
# dwarf the record itself.
MAX_ERROR_MESSAGE_CHARS = 1000


@dataclass(frozen=True)
class DeadLetter:
    """One input record that could not be processed, and why."""

    source_topic: str
    source_partition: int
    source_offset: int
    error_type: str
    error_message: str
    key: bytes | None = None
    value: bytes | None = None

    @classmethod
    def from_error(
        cls,
        source_topic: str,
        source_partition: int,
        source_offset: int,
        error: BaseException,
        key: bytes | None = None,
        value: bytes | None = None,
    ) -> DeadLetter:
        """The dead letter of the record at `source_offset` that raised `error`."""
        return cls(
            source_topic,
            source_partition,
            source_offset,
            error_type_name(error),
            str(error)[:MAX_ERROR_MESSAGE_CHARS],
            key,
            value,
        )

    def headers(self, batch_time: int) -> tuple[tuple[str, bytes], ...]:
        fields = {
            "source.topic": self.source_topic,
            "source.partition": str(self.source_partition),
            "source.offset": str(self.source_offset),
            "error.type": self.error_type,
            "error.message": self.error_message[:MAX_ERROR_MESSAGE_CHARS],
            "batch.time": str(batch_time),
        }
        return tuple((HEADER_PREFIX + name, text.encode()) for name, text in fields.items())


def error_type_name(error: BaseException) -> str:
    """`ValueError` for builtins, `module.Qualified.Name` for everything else.

    >>> from service.errors import SinkError
    >>> error_type_name(ValueError("bad")), error_type_name(SinkError("full"))
    ('ValueError', 'service.errors.SinkError')
    """
    kind = type(error)
    if kind.__module__ == "builtins":
        return kind.__qualname__
    return f"{kind.__module__}.{kind.__qualname__}"


class DeadLetterSink(KafkaSink):
    """A `KafkaSink` whose rows are `DeadLetter`s, written with their original bytes and headers."""

    def __init__(
        self, conf: dict[str, str], topic: str, *, partitions: int = 1, **options: Any
    ) -> None:
        """`options` are those of `KafkaSink` but its serializer: a dead letter is written as
        the bytes it was read as."""
        super().__init__(conf, topic, partitions=partitions, serializer="bytes", **options)

    topic_role = "dead-letters"

    def encode_row(self, row: Any, key: BatchKey) -> OutboundRecord:
        if not isinstance(row, DeadLetter):
            msg = f"a dead-letter sink writes DeadLetter rows, found {type(row).__name__}"
            raise TypeError(msg)
        return OutboundRecord(row.key, row.value, row.headers(key.batch_time))
