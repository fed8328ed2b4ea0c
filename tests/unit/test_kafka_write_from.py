"""Where the Kafka sink's transactions run (`write_from`), decided without a broker or a JVM.

The writes themselves, on the driver, against a real broker and Spark, are in
`tests/kafka/test_kafka_sink_on_driver.py`.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from service.config.settings import InvalidConfig, KafkaSinkSettings, load_settings
from service.errors import ConfigError
from sinks.kafka import KafkaSink
from sinks.kafka_producers import spark_master_is_local

CONF = {"bootstrap.servers": "127.0.0.1:9"}
CONFIG = """\
app_id: wordcount
job: examples.wordcount:build
kafka:
  bootstrap_servers: localhost:9092
sources:
  words: {topics: [words]}
sinks:
  counts: {type: kafka, topic: counts%s}
"""


def test_without_a_running_spark_context_auto_means_the_executors(no_spark_context: None) -> None:
    # An executor process, or a driver before Spark starts, has no local master to go by.
    assert not spark_master_is_local()
    assert not KafkaSink(CONF, "out").writes_on_driver


def test_an_explicit_choice_is_kept() -> None:
    assert KafkaSink(CONF, "out", write_from="driver").writes_on_driver
    assert not KafkaSink(CONF, "out", write_from="executors").writes_on_driver


def test_an_unknown_choice_is_refused_with_the_choices() -> None:
    with pytest.raises(ConfigError, match=r"one of auto, driver, executors, got 'workers'"):
        KafkaSink(CONF, "out", write_from="workers")  # type: ignore[arg-type]  # refused here


def test_the_setting_reaches_the_sink(tmp_path: Path) -> None:
    path = tmp_path / "job.yaml"
    path.write_text(CONFIG % ", write_from: driver")
    settings = load_settings(path, {})
    chosen = settings.sinks["counts"]
    assert isinstance(chosen, KafkaSinkSettings)
    assert chosen.build(settings.kafka, 4).write_from == "driver"

    path.write_text(CONFIG % "")
    default = load_settings(path, {}).sinks["counts"]
    assert isinstance(default, KafkaSinkSettings)
    assert default.write_from == "auto"


def test_a_misspelt_choice_is_a_config_problem(tmp_path: Path) -> None:
    path = tmp_path / "job.yaml"
    path.write_text(CONFIG % ", write_from: driverr")
    with pytest.raises(InvalidConfig) as caught:
        load_settings(path, {})
    assert any("write_from" in problem for problem in caught.value.problems)
