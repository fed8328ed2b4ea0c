"""Settings build the service's parts: the journal union, sinks, starting offsets, the observer."""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from connectors.planner import StartingOffsets
from service.config.settings import (
    BackpressureSettings,
    FileJournalSettings,
    InvalidConfig,
    KafkaJournalSettings,
    KafkaSourceSettings,
    Settings,
    load_settings,
)
from service.driver.wiring import make_journal, make_sink
from service.errors import ConfigError
from service.journal.file import FileJournal
from service.journal.kafka import KafkaJournal
from service.observe.observer import make_observer, rate_controller
from sinks.console import ConsoleSink
from sinks.dead_letters import DeadLetterSink
from sinks.files import FileSink
from sinks.kafka import KafkaSink
from sinks.postgres import PostgresSink

T0 = 1_700_000_000_000
BASE: dict[str, Any] = {
    "app_id": "wc",
    "job": "examples.wordcount:build",
    "kafka": {"bootstrap_servers": "broker:9092"},
}


def load(tmp_path: Path, environ: dict[str, str] | None = None, **changes: Any) -> Settings:
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump({**BASE, **changes}))
    return load_settings(path, environ or {})


def problems(tmp_path: Path, environ: dict[str, str] | None = None, **changes: Any) -> list[str]:
    with pytest.raises(InvalidConfig) as caught:
        load(tmp_path, environ, **changes)
    return list(caught.value.problems)


# --- the journal union ------------------------------------------------------------------------


def test_the_journal_is_a_file_journal_unless_typed(tmp_path: Path) -> None:
    assert load(tmp_path).journal == FileJournalSettings(path="state/journal")
    assert load(tmp_path, journal={"path": "/data/j"}).journal == FileJournalSettings(
        path="/data/j"
    )
    without_defaults = tmp_path / "bare.yaml"
    without_defaults.write_text(yaml.safe_dump({**BASE, "journal": {"path": "/data/j"}}))
    bare = load_settings(without_defaults, {}, defaults=None)
    assert bare.journal == FileJournalSettings(path="/data/j")


def test_each_journal_kind_builds_its_own_journal(tmp_path: Path) -> None:
    file_settings = load(tmp_path, journal={"type": "file", "path": str(tmp_path / "j")})
    journal = make_journal(file_settings)
    assert isinstance(journal, FileJournal)
    assert journal.path == tmp_path / "j"

    kafka = {"type": "kafka", "topic": "wc-journal", "replication_factor": 3}
    kafka_settings = load(tmp_path, journal={**kafka, "min_insync_replicas": 2})
    assert isinstance(kafka_settings.journal, KafkaJournalSettings)
    journal = make_journal(kafka_settings)
    assert isinstance(journal, KafkaJournal)
    assert (journal.topic, journal.app_id) == ("wc-journal", "wc")
    assert (journal.replication_factor, journal.min_insync_replicas) == (3, 2)
    assert journal.conf["bootstrap.servers"] == "broker:9092"


def test_an_unknown_journal_type_is_refused_by_name(tmp_path: Path) -> None:
    assert problems(tmp_path, journal={"type": "postgres", "path": "x"}) == [
        "journal.type: 'postgres' is not one of file, kafka"
    ]
    assert problems(tmp_path, {"DSTREAMS_JOURNAL__TYPE": "kafak"}) == [
        "journal.type: 'kafak' is not one of file, kafka (set by DSTREAMS_JOURNAL__TYPE)"
    ]


def test_each_journal_kind_accepts_only_its_own_keys(tmp_path: Path) -> None:
    assert problems(tmp_path, journal={"type": "file", "topic": "j"}) == [
        "journal.topic: unknown key; allowed keys are type, path"
    ]
    assert problems(tmp_path, journal={"type": "kafka", "topic": "j", "path": "/x"}) == [
        "journal.path: unknown key; allowed keys are type, topic, replication_factor, "
        "min_insync_replicas"
    ]
    assert problems(tmp_path, journal={"type": "kafka", "topic": None}) == [
        "journal: topic is required when type is kafka"
    ]


def test_a_journal_of_another_type_replaces_the_layer_below(tmp_path: Path) -> None:
    kafka = load(tmp_path, journal={"type": "kafka", "topic": "j"})
    assert kafka.journal == KafkaJournalSettings(type="kafka", topic="j")
    back = load(
        tmp_path, {"DSTREAMS_JOURNAL__TYPE": "file"}, journal={"type": "kafka", "topic": "j"}
    )
    assert back.journal == FileJournalSettings()
    same_kind = load(
        tmp_path, {"DSTREAMS_JOURNAL__TOPIC": "k"}, journal={"type": "kafka", "topic": "j"}
    )
    assert same_kind.journal == KafkaJournalSettings(type="kafka", topic="k")


# --- sinks ------------------------------------------------------------------------------------


def test_each_sink_kind_builds_its_own_sink(tmp_path: Path) -> None:
    sinks = {
        "counts": {"type": "kafka", "topic": "counts", "transaction_timeout_ms": "30s"},
        "wide": {"type": "kafka", "topic": "wide", "partitions": 9},
        "table": {"type": "postgres", "dsn": "postgresql://db/x", "table": "t", "columns": ["w"]},
        "folder": {"type": "files", "path": str(tmp_path / "out")},
        "debug": {"type": "console"},
    }
    settings = load(tmp_path, sinks=sinks, default_partitions=6)
    counts, wide = make_sink(settings, "counts"), make_sink(settings, "wide")
    assert isinstance(counts, KafkaSink) and isinstance(wide, KafkaSink)
    assert (counts.topic, counts.partitions, counts.marker_partitions) == ("counts", 6, 6)
    assert counts.transaction_timeout_ms == 30_000
    assert (wide.partitions, wide.marker_partitions) == (9, 9)
    table = make_sink(settings, "table")
    assert isinstance(table, PostgresSink)
    assert (table.table, table.columns, table.key_columns) == ("t", ["w"], None)
    folder = make_sink(settings, "folder")
    assert isinstance(folder, FileSink) and folder.root == str(tmp_path / "out")
    assert isinstance(make_sink(settings, "debug"), ConsoleSink)


def test_an_unconfigured_sink_names_the_configured_ones(tmp_path: Path) -> None:
    settings = load(tmp_path, sinks={"debug": {"type": "console"}})
    with pytest.raises(ConfigError, match=r"sinks\.counts is not configured \(known: debug\)"):
        make_sink(settings, "counts")


def test_the_dead_letter_settings_build_the_dead_letter_sink(tmp_path: Path) -> None:
    settings = load(tmp_path, dead_letter={"topic": "wc.dead", "partitions": 2})
    sink = settings.dead_letter.build(settings.kafka)
    assert isinstance(sink, DeadLetterSink)
    assert (sink.topic, sink.partitions) == ("wc.dead", 2)
    with pytest.raises(ConfigError, match="dead_letter.topic is not set"):
        load(tmp_path).dead_letter.build(settings.kafka)


# --- starting offsets -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("earliest", StartingOffsets.earliest()),
        ("latest", StartingOffsets.latest()),
        ("committed", StartingOffsets.committed()),
        (T0, StartingOffsets.at_timestamp(T0)),
        (str(T0), StartingOffsets.at_timestamp(T0)),  # as an environment variable gives it
        ({"a:0": 5, "a:1": 0}, StartingOffsets.explicit({("a", 0): 5, ("a", 1): 0})),
    ],
)
def test_starting_offsets_are_read_into_the_planners_terms(
    given: object, expected: StartingOffsets
) -> None:
    source = KafkaSourceSettings.model_validate({"topics": ["a"], "starting_offsets": given})
    assert source.starting == expected


def test_starting_offsets_default_to_latest(tmp_path: Path) -> None:
    settings = load(tmp_path, sources={"words": {"topics": ["words"]}})
    assert settings.sources["words"].starting == StartingOffsets.latest()


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ("newest", "'newest' is not one of earliest, latest, committed"),
        (1.5, "1.5 is not one of earliest, latest, committed"),
        (True, "True is not one of earliest, latest, committed"),
        (None, "None is not one of earliest, latest, committed"),
        ({}, "{} is not one of earliest, latest, committed"),
        ({"a": 3}, "'a' is not of the form topic:partition"),
        ({"a:x": 3}, "'a:x' is not of the form topic:partition"),
        ({"a:0": -1}, "offset of 'a:0' is -1; expected an integer >= 0"),
        ({"b:0": 1}, "starting_offsets names topics not in topics: b"),
    ],
)
def test_starting_offsets_that_cannot_be_read_are_refused(given: object, message: str) -> None:
    with pytest.raises(ValidationError, match=re.escape(message)):
        KafkaSourceSettings.model_validate({"topics": ["a"], "starting_offsets": given})


# --- the observer -----------------------------------------------------------------------------


@pytest.fixture
def restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    for handler in list(root.handlers):
        if handler not in handlers:
            root.removeHandler(handler)
    root.setLevel(level)


@pytest.mark.usefixtures("restore_logging")
def test_the_observer_gets_what_settings_say_through_its_constructor(tmp_path: Path) -> None:
    sources = {
        "b": {"topics": ["b"], "max_rate_per_partition": 200},
        "a": {"topics": ["a"], "max_rate_per_partition": 50},
    }
    settings = load(
        tmp_path,
        sources=sources,
        dead_letter={"topic": "wc.dead"},
        backpressure={"enabled": True, "min_rate": 10},
        http={"port": 0},
    )
    observer = make_observer(settings, heartbeat_source=lambda: 42.0)
    assert observer.source_max_rates == {"a": 50, "b": 200}
    assert observer.dead_letter_topic == "wc.dead"
    assert observer.rate is not None and observer.rate.max_rate_per_partition == 200
    assert observer.board.heartbeat_source is not None
    assert observer.board.heartbeat_source() == 42.0


def test_backpressure_has_no_ceiling_when_a_source_has_none() -> None:
    enabled = BackpressureSettings(enabled=True)
    limited = rate_controller(enabled, 1000, {"a": 50.0, "b": 200.0})
    assert limited is not None and limited.max_rate_per_partition == 200.0
    unlimited = rate_controller(enabled, 1000, {"a": 50.0, "b": None})
    assert unlimited is not None and unlimited.max_rate_per_partition is None
    assert rate_controller(BackpressureSettings(), 1000, {"a": 50.0}) is None
