"""The driver JVM's class-data archive: where it is looked for, and the options that use it."""

from __future__ import annotations

from pathlib import Path

import pytest

from service.config.masters import parse_master
from service.config.settings import SparkSettings
from service.driver import class_archive
from service.driver.spark import LOOPBACK, DriverAddress, spark_conf

pytestmark = pytest.mark.unit


def test_auto_looks_in_the_configured_folder_under_a_name_for_this_jvm_and_pyspark(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import pyspark

    monkeypatch.setenv(class_archive.ARCHIVE_DIR_ENV, str(tmp_path))
    path = class_archive.resolve("auto")
    assert path is not None
    assert path.parent == tmp_path
    assert path.name.startswith(f"spark-{pyspark.__version__}-")
    assert path.suffix == ".jsa"
    assert SparkSettings().class_archive == "auto"


def test_another_java_gets_another_archive(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(class_archive.ARCHIVE_DIR_ENV, str(tmp_path))
    before = class_archive.default_path()
    other = tmp_path / "jdk" / "bin" / "java"
    other.parent.mkdir(parents=True)
    other.write_text("#!/bin/sh\n")
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "jdk"))
    assert class_archive.default_path() != before


def test_off_and_paths(tmp_path: Path) -> None:
    assert class_archive.resolve("off") is None
    assert class_archive.resolve(None) is None
    assert class_archive.resolve(str(tmp_path / "a.jsa")) == tmp_path / "a.jsa"


def test_options_only_for_an_archive_that_is_there(tmp_path: Path) -> None:
    archive = tmp_path / "a.jsa"
    assert class_archive.java_options(None) == ""
    assert class_archive.java_options(archive) == ""
    assert "none at" in class_archive.describe_archive(str(archive))
    archive.write_bytes(b"x")
    assert f"-XX:SharedArchiveFile={archive}" in class_archive.java_options(archive)
    assert class_archive.describe_archive(str(archive)) == str(archive)
    assert class_archive.describe_archive("off") == "off"


def test_the_archive_joins_the_drivers_options_and_never_the_executors(tmp_path: Path) -> None:
    archive = tmp_path / "a.jsa"
    archive.write_bytes(b"x")
    master = parse_master("spark://127.0.0.1:7077")
    conf = spark_conf(master, DriverAddress(LOOPBACK, LOOPBACK), archive=archive)
    driver = conf["spark.driver.extraJavaOptions"]
    assert f"-XX:SharedArchiveFile={archive}" in driver
    assert "-Dlog4j.configurationFile=" in driver
    assert "SharedArchiveFile" not in conf.get("spark.executor.extraJavaOptions", "")
