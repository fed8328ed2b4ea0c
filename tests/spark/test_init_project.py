"""`dstreams init` writes a project whose own test passes: pytest run on it in a new process,
as a user would, with the plugin and a Spark of its own."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner

from service.cli.init import init

# The new project's pytest starts a JVM for Spark; on a loaded 2-core runner that is under a
# minute, the test itself a few seconds.
PROJECT_TEST_TIMEOUT_S = 240


def test_the_new_project_test_passes(tmp_path: Path) -> None:
    project = tmp_path / "clicks"
    assert CliRunner().invoke(init, [str(project)]).exit_code == 0

    # `-p`: this checkout's editable install may predate the plugin's entry point; an installed
    # wheel loads it by itself (the -p then finds it registered and does nothing).
    command = [sys.executable, "-m", "pytest", "-p", "service.testing.pytest_plugin"]
    result = subprocess.run(
        [*command, "-p", "no:cacheprovider", "-q"],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=PROJECT_TEST_TIMEOUT_S,
        check=False,
    )

    report = result.stdout + result.stderr
    assert result.returncode == 0, report
    assert "1 passed" in report
