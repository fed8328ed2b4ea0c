"""Every sink declares the whole protocol: where it writes, and a `close()` that may run twice.

Kafka and PostgreSQL sinks close their open clients in `tests/kafka/test_kafka_sink.py` and
`tests/postgres/test_postgres_sink.py`; here they close with nothing open, as a driver whose
job never wrote to them does at shutdown.
"""

from __future__ import annotations

from pathlib import Path

import psycopg
import pytest
from confluent_kafka import KafkaError, KafkaException

from connectors.kafka_client import CommitTimedOut
from service.errors import SinkError
from service.graph.context import StreamingContext
from sinks.base import NO_KAFKA, BatchKey, KafkaNeeds, KafkaTopic, Sink, WaitsOutOutages
from sinks.console import ConsoleSink
from sinks.dead_letters import DeadLetterSink
from sinks.files import FileSink
from sinks.kafka import KafkaSink
from sinks.kafka_markers import default_marker_topic
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


def test_only_sinks_whose_state_is_the_drivers_write_on_the_driver(tmp_path: Path) -> None:
    # Built without a local master, `write_from: auto` Kafka sinks write from the executors
    # (see tests/unit/test_kafka_write_from.py for a local master).
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


def test_only_kafka_sinks_need_anything_of_kafka(tmp_path: Path) -> None:
    needing = {
        name
        for name, sink in every_sink(tmp_path).items()
        if sink.kafka_needs("app", "out") != NO_KAFKA
    }
    assert needing == {"kafka", "dead letters"}


def test_a_kafka_sink_declares_its_topics_their_access_and_its_transactional_ids() -> None:
    sink = KafkaSink(CONF, "out", replication_factor=3, marker_topic="out-markers")
    assert sink.kafka_needs("app", "counts") == KafkaNeeds(
        topics=(
            KafkaTopic("out", "output", ("WRITE",), 3),
            KafkaTopic("out-markers", "markers", ("WRITE", "READ", "ALTER"), 3),
        ),
        transactional_id_prefix="dstreams.app.",
        reads_broker_configs=True,
    )
    assert sink.transactional_id("app", "counts", 2).startswith("dstreams.app.")
    letters = DeadLetterSink(CONF, "dlq").kafka_needs("app", "lines.dead-letters")
    assert [(topic.name, topic.role) for topic in letters.topics] == [
        ("dlq", "dead-letters"),
        (default_marker_topic("app", "lines.dead-letters"), "markers"),
    ]


def test_writing_in_parallel_is_declared_by_every_sink(tmp_path: Path) -> None:
    parallel = {name for name, sink in every_sink(tmp_path).items() if sink.writes_in_parallel}
    assert parallel == {"kafka", "dead letters"}


def test_servers_sinks_wait_out_outages_and_others_do_not(tmp_path: Path) -> None:
    waiting = {n for n, s in every_sink(tmp_path).items() if isinstance(s, WaitsOutOutages)}
    assert waiting == {"kafka", "dead letters", "postgres"}


def raised_from(cause: BaseException) -> SinkError:
    """A sink's error raised while handling `cause`, as the sinks raise theirs."""
    try:
        raise cause
    except BaseException as exc:
        try:
            msg = "the write failed; retry the task"
            raise SinkError(msg) from exc
        except SinkError as wrapped:
            return wrapped


def test_a_kafka_sink_blames_an_outage_only_on_an_unanswering_cluster() -> None:
    sink = KafkaSink(CONF, "out")
    down = KafkaException(KafkaError(KafkaError._ALL_BROKERS_DOWN))  # noqa: SLF001
    assert "_ALL_BROKERS_DOWN" in (sink.outage_in(raised_from(down)) or "")
    timed_out = CommitTimedOut("t", KafkaError(KafkaError._TIMED_OUT))  # noqa: SLF001
    assert sink.outage_in(timed_out) is not None
    refused = KafkaException(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED))
    assert sink.outage_in(raised_from(refused)) is None
    assert sink.outage_in(SinkError("row 3 cannot be written")) is None


def test_a_postgres_sink_blames_an_outage_only_on_a_lost_connection() -> None:
    sink = PostgresSink("postgresql://127.0.0.1:9/none", "t", columns=["a"])
    lost = psycopg.OperationalError("server closed the connection unexpectedly")
    assert "server closed" in (sink.outage_in(raised_from(lost)) or "")
    assert sink.outage_in(raised_from(psycopg.errors.AdminShutdown("shutting down"))) is not None
    assert sink.outage_in(raised_from(psycopg.errors.DiskFull("no space"))) is None
    assert sink.outage_in(raised_from(psycopg.errors.UniqueViolation("duplicate"))) is None
