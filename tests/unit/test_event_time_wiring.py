"""The event-time jobs build from settings: a late-records dead-letter output when asked for
(refused without a dead-letter topic), and a PostgreSQL sink that keeps the highest revision."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from service.config.settings import Settings
from service.driver.engine import build_context
from service.errors import ConfigError

PG_COLUMNS = ["page", "start_ms", "end_ms", "clicks", "revision"]


def config(tmp_path: Path, job: str, **extra: Any) -> dict[str, Any]:
    sink = {
        "type": "postgres",
        "dsn": "postgresql://nobody@127.0.0.1:1/none",
        "table": "windows",
        "columns": PG_COLUMNS,
        "key_columns": ["page", "start_ms"],
        "version_column": "revision",
    }
    return {
        "app_id": "event-wiring",
        "job": job,
        "kafka": {"bootstrap_servers": "127.0.0.1:1"},
        "sources": {"lines": {"topics": ["clicks"]}, "clicks": {"topics": ["clicks"]}},
        "sinks": {"page_windows": sink, "page_minutes": sink},
        "journal": {"type": "file", "path": str(tmp_path / "journal")},
        "checkpoint": {"path": str(tmp_path / "checkpoints")},
        **extra,
    }


def test_late_records_get_a_dead_letter_output(tmp_path: Path) -> None:
    settings = Settings.model_validate(
        config(tmp_path, "examples.late_clicks:build", dead_letter={"topic": "dlq"})
    )
    ctx = build_context(settings)
    try:
        names = [output.name for output in ctx.outputs]
        assert "page_windows" in names
        assert any(name.endswith(".late.dead-letters") for name in names), names
        sink = next(o for o in ctx.outputs if o.name == "page_windows").sink  # type: ignore[attr-defined]
        assert sink.version_column == "revision"
    finally:
        ctx.close()


def test_late_records_without_a_dead_letter_topic_are_refused(tmp_path: Path) -> None:
    settings = Settings.model_validate(config(tmp_path, "examples.late_clicks:build"))
    with pytest.raises(ConfigError, match="dead_letter.topic is not set"):
        build_context(settings)


def test_the_example_builds(tmp_path: Path) -> None:
    settings = Settings.model_validate(config(tmp_path, "examples.event_time_counts:build"))
    ctx = build_context(settings)
    try:
        kinds = [stream.describe()["kind"] for stream in ctx.streams]  # type: ignore[attr-defined]
        assert "records" in kinds and "event_window" in kinds
    finally:
        ctx.close()
