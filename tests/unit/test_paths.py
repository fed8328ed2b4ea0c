"""Where shipped config files are found: source tree, image directory, working directory."""

from __future__ import annotations

from pathlib import Path

import pytest

from service.config import paths


def test_the_source_tree_ships_its_config() -> None:
    assert paths.shipped_config_file("defaults.yaml").is_file()
    assert paths.shipped_config_file("log4j2.properties").is_file()


def test_the_variable_names_the_directory(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(paths.CONFIG_DIR_VARIABLE, str(tmp_path))
    assert paths.shipped_config_file("defaults.yaml") == tmp_path / "defaults.yaml"


def test_an_installed_package_falls_back_to_the_working_directory(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv(paths.CONFIG_DIR_VARIABLE, raising=False)
    monkeypatch.setattr(paths, "_SOURCE_TREE_CONFIG", tmp_path / "site-packages" / "config")
    monkeypatch.chdir(tmp_path)
    assert paths.shipped_config_file("log4j2.properties") == tmp_path / "config/log4j2.properties"
