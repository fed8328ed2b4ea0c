"""`read_output` on a files sink: the committed batches only, as the sink wrote them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from service.errors import ConfigError
from service.testing.outputs import read_file_batches, read_output
from sinks.base import BatchKey
from sinks.files import FileSink


def job_config(sinks: dict[str, Any]) -> dict[str, Any]:
    return {
        "app_id": "wc",
        "job": "examples.wordcount:build",
        "kafka": {"bootstrap_servers": "localhost:9092"},
        "sinks": sinks,
    }


def test_reads_every_committed_batch_and_skips_an_uncommitted_one(tmp_path: Path) -> None:
    sink = FileSink(tmp_path)
    for t, rows in [(1000, [("a", 1)]), (2000, [("b", 2), ("c", 1)])]:
        sink.write(BatchKey("wc", "counts", t, 0), rows)
        sink.commit("wc", "counts", t, 1)
    sink.write(BatchKey("wc", "counts", 3000, 0), [("d", 9)])  # no _SUCCESS: not visible
    config = job_config({"counts": {"type": "files", "path": str(tmp_path)}})

    assert read_output(config, "counts") == [["a", 1], ["b", 2], ["c", 1]]
    assert read_file_batches(tmp_path, "counts") == {1000: [["a", 1]], 2000: [["b", 2], ["c", 1]]}


def test_an_output_of_a_sink_it_cannot_read_is_named() -> None:
    config = job_config({"shown": {"type": "console"}})

    with pytest.raises(ConfigError, match="output 'shown' is a console sink"):
        read_output(config, "shown")
    with pytest.raises(ConfigError, match="output 'missing' is not configured"):
        read_output(config, "missing")
