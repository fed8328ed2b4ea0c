"""The CLI where service.dev is not installed, as in the image (Dockerfile): every runtime command
loads, and `dstreams dev` and `dstreams demo` say that the development tooling is missing.

`sys.modules["service.dev"] = None` stands in for the deleted package: an import of it then fails
and `importlib.util.find_spec` finds nothing, as in the image. The container tier checks the image
itself (tests/containers/test_dstreams_image.py).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from service.cli import main
from service.cli.class_archive import class_archive

pytestmark = pytest.mark.unit

REPO_ROOT = Path(__file__).resolve().parents[2]
WITHOUT_DEV = (
    "import sys; sys.modules['service.dev'] = None; "
    "from service.cli.main import main; sys.argv[0] = 'dstreams'; main()"
)


def dstreams_without_dev(*args: str) -> subprocess.CompletedProcess[str]:
    """The entry point, as the image runs it, with service.dev unimportable."""
    return subprocess.run(  # noqa: S603 - our own interpreter, fixed arguments
        [sys.executable, "-c", WITHOUT_DEV, *args],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_the_dev_tooling_is_found_in_a_checkout_and_not_where_it_was_left_out(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert main.dev_tooling_installed()
    monkeypatch.setitem(sys.modules, "service.dev", None)
    assert not main.dev_tooling_installed()


@pytest.mark.parametrize("args", [["kafka", "--brokers", "3"], ["--help"], []])
def test_dev_says_the_tooling_is_not_installed_whatever_it_is_given(args: list[str]) -> None:
    result = CliRunner().invoke(main.dev_command(installed=False), args)
    assert result.exit_code == 1
    assert "`dstreams dev` needs the development tooling" in result.output
    assert "the dstreams image leaves it out" in result.output
    assert "Traceback" not in result.output


def test_the_entry_point_loads_every_runtime_command_without_service_dev() -> None:
    listed = dstreams_without_dev("--help")
    assert listed.returncode == 0, listed.stderr
    for command in ("run", "ingest", "config", "journal", "checkpoint", "class-archive", "dev"):
        assert f"\n  {command} " in listed.stdout, listed.stdout
    # Spark's executor pods run the image's `dstreams executor` (a hidden command).
    executor = dstreams_without_dev("executor", "--help")
    assert executor.returncode == 0, executor.stderr
    assert "not installed here" in listed.stdout
    dev = dstreams_without_dev("dev", "kafka")
    assert dev.returncode == 1
    assert "needs the development tooling" in dev.stderr, dev.stderr
    demo = dstreams_without_dev("demo", "--seconds", "1")
    assert demo.returncode == 1
    assert "`dstreams demo` needs the development tooling" in demo.stderr, demo.stderr


def test_the_class_archive_is_a_runtime_command_and_dev_keeps_its_old_name() -> None:
    from service.cli.dev import dev

    assert class_archive.name == "class-archive"
    assert dev.commands["class-archive"] is class_archive
