"""A Kafka source is built in one typed step: its settings make an immutable `KafkaSource`, and
the context makes the stream around it. Nothing of the source is set after construction."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
import yaml

from connectors.codecs import KeyedCodec, ParsingCodec
from connectors.planner import StartingOffsets
from connectors.reader import ReadPolicy
from service.config.settings import Settings, load_settings
from service.driver.wiring import make_kafka_source
from service.errors import ConfigError
from service.graph.context import StreamingContext
from service.graph.kafka_source import KafkaSource
from service.graph.layout import TaskLayout
from service.graph.plan import BatchPlan, SourcePlan

BASE: dict[str, Any] = {
    "app_id": "wc",
    "job": "examples.wordcount:build",
    "kafka": {"bootstrap_servers": "127.0.0.1:1"},
    "sources": {
        "lines": {
            "topics": ["b", "a"],
            "codec": "json",
            "key_codec": "utf-8",
            "min_partitions": 2,
            "max_partitions": 3,
            "max_rate_per_partition": 50,
            "starting_offsets": "earliest",
            "group_id": "readers",
        }
    },
}


def shout(value: str) -> str:
    return value.upper()


def whisper(value: str) -> str:
    return value.lower()


def load(tmp_path: Path, **changes: Any) -> Settings:
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump({**BASE, **changes}))
    return load_settings(path, {})


def test_the_settings_build_a_source_with_everything_it_reads_with(tmp_path: Path) -> None:
    source = make_kafka_source(load(tmp_path), "lines")

    assert source.name == "lines"
    assert source.topics == ("b", "a") and source.subscription == ["a", "b"]
    assert source.consumer_conf == {"bootstrap.servers": "127.0.0.1:1", "group.id": "readers"}
    assert (source.min_partitions, source.max_partitions) == (2, 3)
    assert source.max_rate_per_partition == 50
    assert source.starting == StartingOffsets.earliest()
    assert source.codec == "json"
    assert isinstance(source.decoder, KeyedCodec)  # keys need an object, not a codec name
    assert source.read_policy == ReadPolicy(fail_on_decode_error=True)


def test_the_built_source_cannot_be_changed(tmp_path: Path) -> None:
    source = make_kafka_source(load(tmp_path), "lines")
    with pytest.raises(dataclasses.FrozenInstanceError):
        source.max_partitions = 1  # type: ignore[misc]  # the point: it is refused
    with pytest.raises(dataclasses.FrozenInstanceError):
        source.read_policy = ReadPolicy()  # type: ignore[misc]  # the point: it is refused


def test_a_parse_function_makes_a_new_source_and_leaves_the_first_as_it_was() -> None:
    plain = KafkaSource("lines", {"bootstrap.servers": "127.0.0.1:1"}, topics=("a",))
    parsed = plain.parsed_by(shout)

    assert (plain.decoder, plain.parse) == (None, None)
    assert isinstance(parsed.decoder, ParsingCodec)
    assert parsed.parse == f"{__name__}.shout"
    assert parsed.decoder(b"word") == "WORD"


def test_the_stream_describes_its_source_as_the_graph_always_did(tmp_path: Path) -> None:
    settings = load(tmp_path)
    ctx = StreamingContext(
        None, "wc", 1000, source_factory=lambda n: make_kafka_source(settings, n)
    )
    try:
        stream = ctx.kafka_records("lines", parse=shout)
        assert stream.source.parse == f"{__name__}.shout"
        assert stream.params == {
            "name": "lines",
            "codec": "json",
            "subscription": ["a", "b"],
            "max_partitions": 3,
            "parse": f"{__name__}.shout",
        }
        assert ctx.kafka_records("lines") is stream
        with pytest.raises(ConfigError, match="read already"):
            ctx.kafka_records("lines", parse=whisper)
    finally:
        ctx.close()


def test_partition_bounds_are_refused_when_the_source_is_made() -> None:
    with pytest.raises(ConfigError, match=r"source 'lines': max_partitions \(1\) is below"):
        KafkaSource("lines", {}, topics=("a",), min_partitions=2, max_partitions=1)


@pytest.mark.parametrize(
    ("min_partitions", "max_partitions", "layout", "read_tasks"),
    [
        (1, None, None, None),  # a plan journaled before layouts: one task per offset range
        (1, None, TaskLayout(2), 2),  # the batch's layout
        (3, None, TaskLayout(2), 3),  # never below min_partitions
        (1, 5, TaskLayout(2), 5),  # max_partitions, set by the job, wins
    ],
)
def test_a_sources_read_tasks_follow_its_bounds_then_the_batchs_layout(
    tmp_path: Path,
    min_partitions: int,
    max_partitions: int | None,
    layout: TaskLayout | None,
    read_tasks: int | None,
) -> None:
    source = KafkaSource(
        "lines", {}, topics=("a",), min_partitions=min_partitions, max_partitions=max_partitions
    )
    ctx = StreamingContext(None, "wc", 1000, None, source_factory=lambda _name: source)
    try:
        stream = ctx.kafka_records("lines")
        assert stream.read_tasks(BatchPlan(1000, {"lines": SourcePlan()}, layout)) == read_tasks
    finally:
        ctx.close()
