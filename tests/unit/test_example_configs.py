"""Every job in `examples/` has a config a user can run it with: `config/wordcount.yaml` for the
README's first job, `config/examples/<module>.yaml` for the others, each naming its module and
valid as it stands (the same check as `dstreams config validate`). The spark tier runs each one
(tests/spark/test_example_jobs.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from service.config.settings import load_settings

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
# The example jobs; the example tests (test_*.py, conftest.py) run the jobs, they are not jobs.
EXAMPLE_MODULES = sorted(
    p.stem
    for p in (ROOT / "examples").glob("*.py")
    if not p.stem.startswith("test_") and p.stem not in ("__init__", "conftest")
)


def config_of(module: str) -> Path:
    """Where the config of `examples/<module>.py` is."""
    if module == "wordcount":
        return ROOT / "config" / "wordcount.yaml"
    return ROOT / "config" / "examples" / f"{module}.yaml"


def test_the_examples_are_found() -> None:
    assert "wordcount" in EXAMPLE_MODULES
    assert len(EXAMPLE_MODULES) >= 10


@pytest.mark.parametrize("module", EXAMPLE_MODULES)
def test_every_example_has_a_valid_config_naming_it(module: str) -> None:
    path = config_of(module)
    assert path.is_file(), f"examples/{module}.py has no config at {path.relative_to(ROOT)}"
    settings = load_settings(path, environ={})
    assert settings.job.split(":")[0] == f"examples.{module}"


def test_no_config_names_a_missing_example() -> None:
    configs = {p.stem for p in (ROOT / "config" / "examples").glob("*.yaml")}
    assert configs <= set(EXAMPLE_MODULES)
