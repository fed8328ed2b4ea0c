"""Shipping the job's code to executors: what is shipped, and the zip it travels in."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from service.driver.job_code import (
    JobCode,
    import_on_executor,
    job_code,
    needs_shipping,
    zip_job_code,
)
from service.errors import ConfigError


def make_namespace_package(root: Path) -> JobCode:
    """`myjobs` without __init__.py (like the repository's examples/), with a subpackage."""
    (root / "myjobs" / "sub").mkdir(parents=True)
    (root / "myjobs" / "counting.py").write_text("def build(ctx):\n    return 'built'\n")
    (root / "myjobs" / "sub" / "__init__.py").write_text("")
    (root / "myjobs" / "sub" / "helpers.py").write_text("VALUE = 42\n")
    (root / "myjobs" / "__pycache__").mkdir()
    (root / "myjobs" / "__pycache__" / "counting.cpython-311.pyc").write_bytes(b"stale")
    return JobCode("myjobs", root / "myjobs")


def test_the_repositorys_examples_are_a_package_to_ship() -> None:
    code = job_code("examples.wordcount:build")
    assert code.name == "examples"
    assert code.is_package
    assert (code.path / "wordcount.py").is_file()


def test_a_missing_job_module_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="no_such_job_module"):
        job_code("no_such_job_module.sub:build")


@pytest.mark.parametrize(
    ("ship", "where", "expected"),
    [
        ("auto", "site-packages/myjobs", False),  # installed: executors sharing the image have it
        ("auto", "src/myjobs", True),
        ("always", "site-packages/myjobs", True),
        ("never", "src/myjobs", False),
    ],
)
def test_what_auto_always_and_never_ship(
    tmp_path: Path, ship: str, where: str, expected: bool
) -> None:
    (tmp_path / where).mkdir(parents=True)
    code = JobCode("myjobs", tmp_path / where)
    installed = [(tmp_path / "site-packages").resolve()]
    assert needs_shipping(code, ship, installed) is expected  # type: ignore[arg-type] # a literal


def test_dstreams_own_packages_are_never_shipped(tmp_path: Path) -> None:
    assert not needs_shipping(JobCode("service", tmp_path), "auto", [])


def test_the_zip_imports_as_the_package_namespace_packages_included(tmp_path: Path) -> None:
    code = make_namespace_package(tmp_path / "src")
    archive = zip_job_code(code, tmp_path / "out")
    names = zipfile.ZipFile(archive).namelist()
    assert "myjobs/" in names
    assert not any("__pycache__" in name for name in names)
    # A fresh interpreter with only the zip on its path, as an executor's Python worker has.
    script = (
        f"import sys; sys.path.insert(0, {str(archive)!r}); "
        "import myjobs.counting, myjobs.sub.helpers; "
        "print(myjobs.counting.build(None), myjobs.sub.helpers.VALUE)"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, cwd=tmp_path, check=False
    )
    assert result.stdout.split() == ["built", "42"], result.stderr


def test_the_same_sources_give_the_same_zip_bytes(tmp_path: Path) -> None:
    code = make_namespace_package(tmp_path / "src")
    first = zip_job_code(code, tmp_path / "a").read_bytes()
    second = zip_job_code(code, tmp_path / "b").read_bytes()
    assert first == second


def test_a_single_module_job_is_zipped_alone(tmp_path: Path) -> None:
    (tmp_path / "solo.py").write_text("X = 1\n")
    archive = zip_job_code(JobCode("solo", tmp_path / "solo.py"), tmp_path / "out")
    assert zipfile.ZipFile(archive).namelist() == ["solo.py"]


def test_the_executor_side_check_reports_why_an_import_failed() -> None:
    assert import_on_executor("json", 0) is None
    found = import_on_executor("no_such_job_module", 0)
    assert found is not None and found.startswith("ModuleNotFoundError")
