"""JSON and text log lines with app, epoch and batch time in context."""

from __future__ import annotations

import io
import json
import logging
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from service.config.settings import load_settings
from service.observe.logs import batch_context, configure_logging, set_epoch

CANARY = "canary-Lg5mQ1"


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.fixture(autouse=True)
def restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    for handler in list(root.handlers):
        if handler not in handlers:
            root.removeHandler(handler)
    root.setLevel(level)
    set_epoch(None)


def lines(stream: io.StringIO) -> list[dict[str, object]]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def test_json_lines_carry_context() -> None:
    out = io.StringIO()
    configure_logging("json", "INFO", "wordcount", stream=out)
    log = logging.getLogger("service.driver.engine")
    log.info("starting")
    set_epoch(3)
    with batch_context(1_700_000_000_000):
        log.warning("batch %d slow", 7, extra={"processing_s": 1.5})
    log.debug("hidden at INFO")
    first, second = lines(out)
    assert first["level"] == "INFO" and first["logger"] == "service.driver.engine"
    assert first["message"] == "starting" and first["app"] == "wordcount"
    assert "epoch" not in first and "batch_time" not in first
    assert str(first["timestamp"]).endswith("Z") and "T" in str(first["timestamp"])
    assert second["message"] == "batch 7 slow"
    assert second["epoch"] == 3 and second["batch_time"] == 1_700_000_000_000
    assert second["processing_s"] == 1.5


def test_exceptions_are_one_json_line() -> None:
    out = io.StringIO()
    configure_logging("json", "INFO", "wc", stream=out)
    try:
        raise RuntimeError("boom")  # noqa: EM101 - the message is the thing under test
    except RuntimeError:
        logging.getLogger("x").exception("failed")
    (entry,) = lines(out)
    assert "RuntimeError: boom" in str(entry["exception"])


def test_batch_context_is_per_thread() -> None:
    out = io.StringIO()
    configure_logging("json", "INFO", "wc", stream=out)
    log = logging.getLogger("x")

    def other_thread() -> None:
        log.info("other")

    with batch_context(5):
        thread = threading.Thread(target=other_thread)
        thread.start()
        thread.join()
        log.info("mine")
    entries = {entry["message"]: entry for entry in lines(out)}
    assert "batch_time" not in entries["other"]
    assert entries["mine"]["batch_time"] == 5


def test_auto_is_text_on_a_terminal_and_json_otherwise() -> None:
    terminal = _Terminal()
    configure_logging("auto", "INFO", "wc", stream=terminal)
    with batch_context(42):
        logging.getLogger("service.x").info("hello")
    text = terminal.getvalue()
    assert "INFO  service.x [batch 42] hello" in text
    assert not text.startswith("{")
    pipe = io.StringIO()
    configure_logging("auto", "INFO", "wc", stream=pipe)
    logging.getLogger("service.x").info("hello")
    assert lines(pipe)[0]["message"] == "hello"


def test_configuring_twice_replaces_the_handler() -> None:
    first, second = io.StringIO(), io.StringIO()
    configure_logging("json", "INFO", "wc", stream=first)
    configure_logging("text", "DEBUG", "wc", stream=second)
    logging.getLogger("x").debug("once")
    assert first.getvalue() == ""
    assert second.getvalue().count("once") == 1


def test_secrets_never_reach_the_log(tmp_path: Path) -> None:
    path = tmp_path / "job.yaml"
    path.write_text(
        "app_id: wc\njob: m:f\n"
        f"kafka: {{bootstrap_servers: b:9092, sasl_password: {CANARY}}}\n"
        f"sinks: {{pg: {{type: postgres, dsn: 'postgresql://u:{CANARY}@h/d', table: t, "
        "columns: [a]}}\n"
    )
    settings = load_settings(path, {})
    out = io.StringIO()
    configure_logging("json", "INFO", settings.app_id, stream=out)
    log = logging.getLogger("service.driver.engine")
    log.info("settings: %s", settings)
    log.info("settings: %r", settings.masked_dict())
    log.info("password", extra={"password": settings.kafka.sasl_password})
    assert out.getvalue().count("\n") == 3
    assert CANARY not in out.getvalue()
