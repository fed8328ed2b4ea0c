"""The pytest plugin is one plugin to pytest however it is loaded: by `-p` of its module (this
repository's addopts) and by its `pytest11` entry point once the distribution is installed."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

import service.testing.pytest_plugin as plugin

PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"
MODULE = "service.testing.pytest_plugin"


def test_the_entry_point_is_named_as_the_module_it_loads() -> None:
    project = tomllib.loads(PYPROJECT.read_text())["project"]

    assert project["entry-points"]["pytest11"] == {MODULE: MODULE}


def test_loading_it_by_module_and_by_entry_point_name_registers_it_once() -> None:
    manager = pytest.PytestPluginManager()

    manager.import_plugin(MODULE)
    manager.import_plugin(MODULE, consider_entry_points=True)  # what `-p` does

    assert manager.get_plugin(MODULE) is plugin
    assert [p for p in manager.get_plugins() if p is plugin] == [plugin]
