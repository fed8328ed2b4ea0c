"""The executors' daemon: which of Spark's archives it takes off the Python path, and how a worker
ends when Spark hangs up (pure logic)."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest

from service.driver.spark_daemon import quiet_when_spark_hangs_up, spark_archives_to_drop


def make_package(root: Path, name: str, version: str) -> None:
    (root / name).mkdir(parents=True)
    (root / name / "__init__.py").write_text("")
    (root / name / "version.py").write_text(f'__version__: str = "{version}"\n')


def make_pyspark_zip(path: Path, version: str) -> str:
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("pyspark/__init__.py", "")
        archive.writestr("pyspark/version.py", f"__version__: str = '{version}'\n")
    return str(path)


@pytest.fixture
def installed(tmp_path: Path) -> Path:
    site = tmp_path / "site-packages"
    make_package(site, "pyspark", "4.1.4")
    make_package(site, "py4j", "0.10.9.9")
    return site


def test_archives_of_the_installed_versions_and_jars_are_dropped(
    installed: Path, tmp_path: Path
) -> None:
    pyspark_zip = make_pyspark_zip(tmp_path / "pyspark.zip", "4.1.4")
    py4j_zip = str(tmp_path / "py4j-0.10.9.9-src.zip")
    jar = str(tmp_path / "spark-core_2.13-4.1.4.jar")
    user_zip = str(tmp_path / "userFiles" / "deps.zip")
    path = [str(tmp_path / "job"), pyspark_zip, py4j_zip, jar, user_zip, str(installed)]

    assert sorted(spark_archives_to_drop(path)) == sorted([pyspark_zip, py4j_zip, jar])


def test_archives_of_other_versions_stay(installed: Path, tmp_path: Path) -> None:
    pyspark_zip = make_pyspark_zip(tmp_path / "pyspark.zip", "4.0.0")
    py4j_zip = str(tmp_path / "py4j-0.10.9.7-src.zip")

    assert spark_archives_to_drop([pyspark_zip, py4j_zip, str(installed)]) == []


def test_archives_stay_when_nothing_is_installed(tmp_path: Path) -> None:
    pyspark_zip = make_pyspark_zip(tmp_path / "pyspark.zip", "4.1.4")
    py4j_zip = str(tmp_path / "py4j-0.10.9.9-src.zip")

    assert spark_archives_to_drop([pyspark_zip, py4j_zip, str(tmp_path / "empty")]) == []


def test_a_worker_whose_connection_spark_closed_exits_with_one_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    def hung_up(sock: object, authenticated: bool) -> int:
        raise BrokenPipeError(32, "Broken pipe")

    assert quiet_when_spark_hangs_up(hung_up)(object(), True) == 1
    said = capsys.readouterr().err
    assert "Spark closed its connection (Broken pipe" in said
    assert "Traceback" not in said
    assert len(said.splitlines()) == 1


def test_other_outcomes_of_a_worker_pass_through() -> None:
    def finished(sock: object, authenticated: bool) -> int:
        return 0 if authenticated else 7

    def failed(sock: object, authenticated: bool) -> int:
        msg = "a real bug"
        raise ValueError(msg)

    assert quiet_when_spark_hangs_up(finished)(object(), True) == 0
    assert quiet_when_spark_hangs_up(finished)(object(), False) == 7
    with pytest.raises(ValueError, match="a real bug"):
        quiet_when_spark_hangs_up(failed)(object(), True)
