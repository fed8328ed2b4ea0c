"""Every sink declares the whole protocol: where it writes, and a `close()` that may run twice.

Kafka and PostgreSQL sinks close their open clients in `tests/kafka/test_kafka_sink.py` and
`tests/postgres/test_postgres_sink.py`; here they close with nothing open, as a driver whose
job never wrote to them does at shutdown.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from service.graph.context import StreamingContext
from sinks.base import BatchKey, Sink
from sinks.console import ConsoleSink
from sinks.dead_letters import DeadLetterSink
from sinks.files import FileSink
from sinks.kafka import KafkaSink
from sinks.memory import MemorySink
from sinks.postgres import PostgresSink

KEY = BatchKey("app", "out", 1000, 0)
CONF = {"bootstrap.servers": "127.0.0.1:9"}


def every_sink(tmp_path: Path) -> dict[str, Sink]:
    return {
        "memory": MemorySink(),
        "console": ConsoleSink(),
        "files": FileSink(tmp_path / "out"),
        "kafka": KafkaSink(CONF, "out"),
        "dead letters": DeadLetterSink(CONF, "out.dead"),
        "postgres": PostgresSink("postgresql://127.0.0.1:9/none", "t", columns=["a"]),
    }


def test_every_sink_implements_the_whole_protocol(tmp_path: Path) -> None:
    for name, sink in every_sink(tmp_path).items():
        assert isinstance(sink, Sink), name
        assert isinstance(sink.writes_on_driver, bool), name


def test_only_sinks_whose_state_is_the_drivers_write_on_the_driver(
    tmp_path: Path, no_spark_context: None
) -> None:
    # Without a local SparkContext in the process, `write_from: auto` Kafka sinks write from the
    # executors (see tests/unit/test_kafka_write_from.py for a local master).
    on_driver = {name for name, sink in every_sink(tmp_path).items() if sink.writes_on_driver}
    assert on_driver == {"memory", "console"}


def test_closing_twice_with_nothing_open_does_not_raise(tmp_path: Path) -> None:
    for sink in every_sink(tmp_path).values():
        sink.close()
        sink.close()


def test_memory_sink_keeps_what_was_written_after_close() -> None:
    sink = MemorySink()
    sink.write(KEY, [1, 2])
    sink.commit("app", "out", 1000, 1)
    sink.close()
    sink.close()
    assert sink.batches("out") == [[1, 2]]


def test_files_sink_still_writes_after_close(tmp_path: Path) -> None:
    sink = FileSink(tmp_path)
    sink.setup("app", "out")
    sink.close()
    sink.close()
    assert sink.write(KEY, ["a"]).rows == 1
    sink.commit("app", "out", 1000, 1)
    assert sink.read_batch("out", 1000) == ["a"]


def test_console_sink_flushes_on_close(capsys: pytest.CaptureFixture[str]) -> None:
    sink = ConsoleSink()
    sink.write(KEY, ["row"])
    sink.close()
    sink.close()
    assert capsys.readouterr().out == "[out t=1000 p=0] 'row'\n"


class ClosingSink(MemorySink):
    """Counts `close()` calls."""

    def __init__(self) -> None:
        super().__init__()
        self.closed = 0

    def close(self) -> None:
        self.closed += 1


def test_closing_the_context_closes_every_outputs_sink() -> None:
    ctx = StreamingContext(None, "app", 1000)
    first, second = ClosingSink(), ClosingSink()
    stream = ctx.queue_stream([[1]])
    stream.write("first", first)
    stream.map(str).write("second", second)
    stream.foreach_batch(lambda rdd, t: None)
    ctx.close()
    assert (first.closed, second.closed) == (1, 1)
