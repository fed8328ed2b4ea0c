"""The layers of docs/architecture.md are enforced: the tree keeps them, and a broken one fails."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"
PACKAGES = ("service", "connectors", "sinks")


def lint_imports(tree: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-logo", "--no-cache", "--config", str(tree / "pyproject.toml")],
        cwd=tree,
        env={"PYTHONPATH": str(tree), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.fixture
def tree_copy(tmp_path: Path) -> Path:
    """The packages and the contracts, copied so that a test can break them."""
    for package in PACKAGES:
        shutil.copytree(ROOT / package, tmp_path / package, ignore=shutil.ignore_patterns("*.pyc"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


def test_the_tree_keeps_every_contract() -> None:
    result = lint_imports(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "broken" not in result.stdout.lower().replace("0 broken", "")


def test_a_graph_module_importing_the_driver_breaks_the_layers(tree_copy: Path) -> None:
    module = tree_copy / "service" / "graph" / "functions.py"
    module.write_text(module.read_text() + "\nimport service.driver.engine  # noqa\n")
    result = lint_imports(tree_copy)
    assert result.returncode != 0
    assert "service.graph is not allowed to import service.driver" in result.stdout


def test_a_sink_importing_the_graph_breaks_the_leaf_rule(tree_copy: Path) -> None:
    module = tree_copy / "sinks" / "files.py"
    module.write_text(module.read_text() + "\nimport service.graph.context  # noqa\n")
    result = lint_imports(tree_copy)
    assert result.returncode != 0
    assert "sinks and connectors import only the leaf modules" in result.stdout
    assert "BROKEN" in result.stdout
