"""Service logging: JSON lines for log collectors, readable text on a terminal.

Every line carries the app id, the driver's epoch once known, and the batch time while a batch is
being processed. The engine sets the batch with `with batch_context(t): ...` (a context variable,
so concurrent batches on different threads do not mix) and the epoch with `set_epoch(n)`.
Threads started inside a batch see its batch time only if run in a copy of the context
(`contextvars.copy_context().run`).

Spark's JVM logs are configured separately, by config/log4j2.properties (WARN by default).
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Any, Literal, TextIO

LogFormat = Literal["json", "text", "auto"]

_batch_time: ContextVar[int | None] = ContextVar("dstreams_batch_time", default=None)
# Process-wide, not per context: one driver holds one epoch at a time, on every thread.
_process: dict[str, Any] = {"app": None, "epoch": None}
# Attributes every LogRecord has; anything else on a record came from `extra=` and is kept.
_STANDARD_ATTRS = frozenset(vars(logging.makeLogRecord({}))) | {"message", "asctime"}
_CONTEXT_ATTRS = ("app", "epoch", "batch_time")
# Libraries that are chatty at INFO: py4j logs every gateway call and connection.
_QUIET_LOGGERS = ("py4j", "urllib3", "kafka")


def set_epoch(epoch: int | None) -> None:
    """The journal epoch this driver holds; added to every log line from now on."""
    _process["epoch"] = epoch


@contextmanager
def batch_context(batch_time: int) -> Iterator[None]:
    """Log lines inside the block carry `batch_time` (ms since the epoch)."""
    token = _batch_time.set(batch_time)
    try:
        yield
    finally:
        _batch_time.reset(token)


class _ContextFilter(logging.Filter):
    """Stamps app, epoch and batch time on each record in the thread that logs it."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.app = _process["app"]
        record.epoch = _process["epoch"]
        record.batch_time = _batch_time.get()
        return True


def _timestamp(record: logging.LogRecord) -> str:
    moment = datetime.fromtimestamp(record.created, tz=UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


class JsonFormatter(logging.Formatter):
    """One JSON object per line: timestamp, level, logger, message, context, then extras."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "timestamp": _timestamp(record),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for name in _CONTEXT_ATTRS:
            value = getattr(record, name, None)
            if value is not None:
                entry[name] = value
        for name, value in vars(record).items():
            if name not in _STANDARD_ATTRS and name not in _CONTEXT_ATTRS:
                entry[name] = value
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        if record.stack_info:
            entry["stack"] = self.formatStack(record.stack_info)
        # default=str: an object passed in `extra=` is logged as its str (SecretStr masks itself).
        return json.dumps(entry, default=str, ensure_ascii=False)


class TextFormatter(logging.Formatter):
    """`2024-05-01T12:00:00.123Z INFO  service.driver.engine [epoch 3 batch 1714564800000] msg`."""

    def format(self, record: logging.LogRecord) -> str:
        where = _text_context(record)
        message = record.getMessage()
        text = f"{_timestamp(record)} {record.levelname:<5} {record.name}{where} {message}"
        if record.exc_info:
            text += "\n" + self.formatException(record.exc_info)
        if record.stack_info:
            text += "\n" + self.formatStack(record.stack_info)
        return text


def _text_context(record: logging.LogRecord) -> str:
    labelled = (
        ("epoch", getattr(record, "epoch", None)),
        ("batch", getattr(record, "batch_time", None)),
    )
    parts = [f"{label} {value}" for label, value in labelled if value is not None]
    return f" [{' '.join(parts)}]" if parts else ""


class _ServiceHandler(logging.StreamHandler[TextIO]):
    """Marks the handler `configure_logging` installed, so a second call replaces it."""


def configure_logging(
    format: LogFormat = "auto",  # named like the `logging.format` setting
    level: str = "INFO",
    app_id: str | None = None,
    *,
    stream: TextIO | None = None,
) -> logging.Handler:
    """Route all Python logging to `stream` (stderr) as JSON lines or text; returns the handler.

    `auto` means text when the stream is a terminal and JSON otherwise (a container's log). Calling
    it again replaces the previous configuration; other handlers (e.g. pytest's) are left alone.
    """
    out = stream if stream is not None else sys.stderr
    _process["app"] = app_id
    handler = _ServiceHandler(out)
    handler.addFilter(_ContextFilter())
    handler.setFormatter(TextFormatter() if _wants_text(format, out) else JsonFormatter())
    root = logging.getLogger()
    for old in [h for h in root.handlers if isinstance(h, _ServiceHandler)]:
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
    for name in _QUIET_LOGGERS:
        logging.getLogger(name).setLevel(max(logging.WARNING, root.level))
    logging.captureWarnings(True)
    return handler


def writes_json(format: LogFormat, stream: TextIO | None = None) -> bool:
    """Whether `configure_logging(format)` writes JSON to `stream` (stderr): what the JVM's logs
    follow, so that one process writes one format."""
    return not _wants_text(format, stream if stream is not None else sys.stderr)


def _wants_text(format: str, stream: TextIO) -> bool:
    if format == "auto":
        isatty = getattr(stream, "isatty", None)
        return bool(isatty and isatty())
    if format in ("json", "text"):
        return format == "text"
    msg = f"log format {format!r} is not one of json, text, auto"
    raise ValueError(msg)
