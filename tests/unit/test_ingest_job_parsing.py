"""The ingest endpoint checks records with the job's own parse function where the job gives one
(the job's graph built without Spark or a broker)."""

from __future__ import annotations

from typing import Any

import pytest

from connectors.codecs import DecodeError
from service.config.settings import Settings
from service.graph.context import StreamingContext
from service.ingest.job_parsing import source_decoders


def price_of(event: dict[str, Any]) -> int:
    return int(event["price"])


def build(ctx: StreamingContext) -> None:
    ctx.source("orders", parse=price_of).write("out")
    ctx.source("clicks").write("out2")


def settings(job: str) -> Settings:
    return Settings.model_validate(
        {
            "app_id": "parse-at-the-door",
            "job": job,
            "kafka": {"bootstrap_servers": "127.0.0.1:1"},
            "sources": {
                "orders": {"topics": ["orders"], "codec": "json"},
                "clicks": {"topics": ["clicks"], "codec": "utf-8"},
                "audit": {"topics": ["audit"], "codec": "json"},
            },
            "sinks": {"out": {"type": "console"}, "out2": {"type": "console"}},
        }
    )


def test_the_jobs_parse_function_checks_its_sources_records() -> None:
    decoders = source_decoders(settings(f"{__name__}:build"), ["orders", "clicks", "audit"])
    assert decoders["orders"](b'{"price": "3"}') == 3
    with pytest.raises(DecodeError, match=r"\[KeyError\] 'price'"):
        decoders["orders"](b'{"cost": 3}')
    assert decoders["clicks"](b"text") == "text"  # read without parse: its codec
    with pytest.raises(DecodeError):
        decoders["audit"](b"[NaN]")  # not read by the job: its codec


def test_a_job_that_cannot_be_built_here_leaves_the_codecs(
    caplog: pytest.LogCaptureFixture,
) -> None:
    decoders = source_decoders(settings("no_such_module_anywhere:build"), ["orders"])
    assert decoders["orders"](b'{"cost": 3}') == {"cost": 3}
    assert "not with the job's parse functions" in caplog.text
