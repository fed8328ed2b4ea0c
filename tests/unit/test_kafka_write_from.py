"""Where the Kafka sink's transactions run (`write_from`), decided without a broker or a JVM:
`auto` follows the configured Spark master, decided once when the sinks are wired.

The writes themselves, on the driver, against a real broker and Spark, are in
`tests/kafka/test_kafka_sink_on_driver.py`.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from service.config.settings import InvalidConfig, KafkaSinkSettings, Settings, load_settings
from service.config.sinks import SinkBuildContext
from service.driver.wiring import make_sink
from service.errors import ConfigError
from sinks.kafka import KafkaSink

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
# On a cluster, executors write the checkpoints: the path must be one they all see.
ON_A_CLUSTER = """spark: {master: %r}
checkpoint: {path: /mnt/shared/checkpoints}
dead_letter: {topic: letters}
"""


def test_without_a_local_master_auto_means_the_executors() -> None:
    # A sink built without the wiring's decision has no local master to go by.
    assert not KafkaSink(CONF, "out").writes_on_driver
    assert KafkaSink(CONF, "out", local_master=True).writes_on_driver


def settings_with(tmp_path: Path, master: str, write_from: str = "auto") -> Settings:
    path = tmp_path / "job.yaml"
    path.write_text(CONFIG % f", write_from: {write_from}" + ON_A_CLUSTER % master)
    return load_settings(path, {})


@pytest.mark.parametrize(
    ("master", "on_driver"),
    [
        ("local", True),
        ("local[2]", True),
        ("local[*]", True),
        ("spark://10.0.0.5:7077", False),
        ("k8s://https://kubernetes.default.svc:443", False),
    ],
)
def test_auto_follows_the_configured_master(tmp_path: Path, master: str, on_driver: bool) -> None:
    settings = settings_with(tmp_path, master)
    assert make_sink(settings, "counts").writes_on_driver is on_driver
    local = settings.spark.parsed_master.is_local
    assert settings.dead_letter.build(settings.kafka, local_master=local).writes_on_driver is (
        on_driver
    )


@pytest.mark.parametrize("master", ["local[2]", "spark://10.0.0.5:7077"])
def test_an_explicit_choice_is_kept_whatever_the_master(tmp_path: Path, master: str) -> None:
    assert make_sink(settings_with(tmp_path, master, "driver"), "counts").writes_on_driver
    executors = settings_with(tmp_path, master, "executors")
    assert not make_sink(executors, "counts").writes_on_driver


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
    assert chosen.build(SinkBuildContext(settings.kafka, 4)).write_from == "driver"

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
