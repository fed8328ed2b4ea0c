"""`dstreams --version` and `dstreams version` print the installed distribution's version."""

from __future__ import annotations

import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

from click.testing import CliRunner

from service.cli.main import cli

REPO_ROOT = Path(__file__).resolve().parents[2]
# pyproject.toml's [project] name: the metadata the version is read from.
DISTRIBUTION = "kafka-dstreams"


def test_version_option_prints_the_distribution_version() -> None:
    result = CliRunner().invoke(cli, ["--version"], catch_exceptions=False)
    assert result.exit_code == 0
    assert result.stdout == f"dstreams {version(DISTRIBUTION)}\n"


def test_version_command_agrees_with_the_option() -> None:
    result = CliRunner().invoke(cli, ["version"], catch_exceptions=False)
    assert result.exit_code == 0
    assert result.stdout == f"{version(DISTRIBUTION)}\n"


def test_the_module_entry_point_prints_the_version() -> None:
    # As a person types it: the entry point's main(), which registers every command group first.
    completed = subprocess.run(
        [sys.executable, "-m", "service", "--version"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr
    assert completed.stdout == f"dstreams {version(DISTRIBUTION)}\n"
    assert completed.stderr == ""
