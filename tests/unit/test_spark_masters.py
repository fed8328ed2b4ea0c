"""Any Spark master: parsing its URL, the driver's address, and the Spark properties set for it."""

from __future__ import annotations

from pathlib import Path

import pytest

from service.config.masters import parse_master
from service.config.settings import load_settings
from service.driver.spark import (
    BASE_CONF,
    LOOPBACK,
    DriverAddress,
    driver_address,
    spark_conf,
    with_task_retries,
)
from service.errors import ConfigError

MINIMAL = """\
app_id: wordcount
job: examples.wordcount:build
kafka: {bootstrap_servers: localhost:9092}
"""


@pytest.mark.parametrize(
    ("url", "kind", "endpoints"),
    [
        ("local", "local", ()),
        ("local[*]", "local", ()),
        ("local[2,4]", "local", ()),
        ("spark://master:7077", "standalone", (("master", 7077),)),
        ("spark://a:7077,b:7078", "standalone", (("a", 7077), ("b", 7078))),
        ("spark://master", "standalone", (("master", 7077),)),
        ("k8s://https://kubernetes.default.svc", "kubernetes", (("kubernetes.default.svc", 443),)),
        ("k8s://https://10.0.0.1:6443", "kubernetes", (("10.0.0.1", 6443),)),
        ("k8s://api.example:8443", "kubernetes", (("api.example", 8443),)),
        ("k8s://http://127.0.0.1:8001", "kubernetes", (("127.0.0.1", 8001),)),
        ("yarn", "yarn", ()),
    ],
)
def test_master_urls_parse(url: str, kind: str, endpoints: tuple[tuple[str, int], ...]) -> None:
    master = parse_master(url)
    assert (master.kind, master.endpoints) == (kind, endpoints)


@pytest.mark.parametrize("url", ["mesos://m:5050", "local[two]", "spark://", "k8s://", "spark"])
def test_other_urls_are_refused_naming_the_accepted_forms(url: str) -> None:
    with pytest.raises(ValueError, match="expected local, local\\[N\\]"):
        parse_master(url)


@pytest.mark.parametrize(
    ("url", "on_this_host"),
    [
        ("local[2]", True),
        ("spark://127.0.0.1:7077", True),
        ("spark://localhost:7077", True),
        ("spark://10.0.0.5:7077", False),
        ("spark://127.0.0.1:7077,10.0.0.5:7077", False),
        ("k8s://https://127.0.0.1:6443", False),  # pods are hosts of their own
        ("yarn", False),
    ],
)
def test_which_masters_keep_every_executor_on_this_host(url: str, on_this_host: bool) -> None:
    assert parse_master(url).on_this_host is on_this_host


def test_a_bad_master_in_the_config_file_is_one_problem_naming_the_field(tmp_path: Path) -> None:
    path = tmp_path / "job.yaml"
    path.write_text(MINIMAL + "spark: {master: 'mesos://m:5050'}\n")
    with pytest.raises(ConfigError) as caught:
        load_settings(path, {})
    assert "spark.master" in str(caught.value)
    assert "spark://host:port" in str(caught.value)


def test_driver_host_comes_from_the_environment(tmp_path: Path) -> None:
    path = tmp_path / "job.yaml"
    path.write_text(
        MINIMAL
        + "spark: {master: 'k8s://https://kubernetes.default.svc'}\n"
        + "checkpoint: {path: /var/lib/dstreams/checkpoints}\n"
    )
    settings = load_settings(path, {"DSTREAMS_SPARK__DRIVER_HOST": "10.1.2.3"})
    assert settings.spark.driver_host == "10.1.2.3"
    address = driver_address(settings.spark.parsed_master, settings.spark.driver_host)
    assert address == DriverAddress("10.1.2.3", "10.1.2.3")


def test_local_mode_keeps_loopback_whatever_is_configured() -> None:
    address = driver_address(parse_master("local[2]"), "10.1.2.3", "0.0.0.0")  # noqa: S104
    assert address == DriverAddress(LOOPBACK, LOOPBACK)


def test_a_cluster_driver_listens_where_configured() -> None:
    master = parse_master("spark://10.0.0.5:7077")
    address = driver_address(master, "10.0.0.9", "0.0.0.0")  # noqa: S104
    assert address.spark_conf() == {
        "spark.driver.host": "10.0.0.9",
        "spark.driver.bindAddress": "0.0.0.0",  # noqa: S104
    }


def test_the_default_cluster_address_is_the_route_towards_the_master() -> None:
    # A loopback master is reached over loopback; no packet is sent to find out.
    address = driver_address(parse_master("spark://127.0.0.1:7077"))
    assert address == DriverAddress("127.0.0.1", "127.0.0.1")


def test_an_unresolvable_master_asks_for_spark_driver_host() -> None:
    with pytest.raises(ConfigError, match="spark.driver_host"):
        driver_address(parse_master("spark://no-such-host.invalid:7077"))


def test_spark_conf_layers_base_address_then_user_settings() -> None:
    master = parse_master("spark://10.0.0.5:7077")
    conf = spark_conf(master, DriverAddress("10.0.0.9", "10.0.0.9"), {"spark.locality.wait": "3s"})
    assert conf["spark.driver.host"] == "10.0.0.9"
    assert conf["spark.locality.wait"] == "3s"
    assert conf["spark.python.daemon.module"] == BASE_CONF["spark.python.daemon.module"]
    # The driver's log4j2 file is a path on this machine: executors elsewhere do not get it.
    assert "spark.executor.extraJavaOptions" not in conf


def test_executors_on_this_host_share_the_drivers_logging_file() -> None:
    master = parse_master("spark://127.0.0.1:7077")
    conf = spark_conf(master, DriverAddress(LOOPBACK, LOOPBACK))
    assert conf.get("spark.executor.extraJavaOptions") == conf["spark.driver.extraJavaOptions"]


def test_only_local_mode_gets_task_retries_added() -> None:
    assert with_task_retries("local[2]") == "local[2,4]"
    assert with_task_retries("spark://m:7077") == "spark://m:7077"
