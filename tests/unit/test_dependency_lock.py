"""The lock files the image installs from (devtools/lock_dependencies.py) agree with pyproject.toml.

A dependency added to pyproject.toml, or a range narrowed past its pin, fails here until the locks
are written again; a distribution missing from the lock's closure fails the image build instead
(pip's `--require-hashes` refuses an unpinned dependency).
"""

from __future__ import annotations

import importlib.util
import re
import tomllib
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from packaging.requirements import Requirement

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "devtools" / "lock_dependencies.py"


def load_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("lock_dependencies", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


locking = load_script()
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def unpinned(requirements: list[str], pins: dict[str, str]) -> list[str]:
    """Each requirement the pins miss or pin outside its range, with what the lock holds."""
    problems = []
    for text in requirements:
        requirement = Requirement(text)
        pinned = pins.get(locking.normalize(requirement.name))
        if pinned is None or not requirement.specifier.contains(pinned, prereleases=True):
            problems.append(f"{text} (locked: {pinned})")
    return problems


@pytest.mark.parametrize(
    ("lock", "requirements"),
    [
        (locking.RUNTIME_LOCK, locking.runtime_requirements(PYPROJECT)),
        (locking.BUILD_LOCK, locking.build_requirements(PYPROJECT)),
    ],
    ids=["runtime", "build"],
)
def test_the_lock_pins_every_dependency_of_pyproject_within_its_range(
    lock: Path, requirements: list[str]
) -> None:
    problems = unpinned(requirements, locking.read_pins(lock))
    assert not problems, f"{lock.name} is stale; run {locking.COMMAND}: {problems}"


def test_a_dependency_out_of_range_or_missing_is_found() -> None:
    pins = {"pyspark": "4.1.4", "click": "8.5.1"}
    assert unpinned(["pyspark>=4.1,<4.2", "Click>=8.1"], pins) == []
    assert unpinned(["pyspark>=4.2", "fastavro>=1.9"], pins) == [
        "pyspark>=4.2 (locked: 4.1.4)",
        "fastavro>=1.9 (locked: None)",
    ]


@pytest.mark.parametrize(
    "lock", [locking.RUNTIME_LOCK, locking.BUILD_LOCK], ids=["runtime", "build"]
)
def test_every_pin_is_exact_and_carries_a_sha256(lock: Path) -> None:
    # The --require-hashes format: pip refuses the whole file if one line lacks either.
    entries = re.split(r"\n(?=\S)", lock.read_text().strip())
    requirements = [entry for entry in entries if not entry.startswith("#")]
    assert requirements
    for entry in requirements:
        assert re.match(r"[a-z0-9-]+==[\w.]+ \\\n", entry), entry
        assert re.search(r"--hash=sha256:[0-9a-f]{64}", entry), entry


def test_the_two_locks_agree_where_they_overlap() -> None:
    runtime = locking.read_pins(locking.RUNTIME_LOCK)
    build = locking.read_pins(locking.BUILD_LOCK)
    assert {name: runtime[name] for name in runtime.keys() & build.keys()} == {
        name: build[name] for name in runtime.keys() & build.keys()
    }


def test_pylock_packages_become_pinned_lines_with_the_hashes_of_their_files() -> None:
    pylock: dict[str, Any] = {
        "packages": [
            {
                "name": "PySpark",
                "version": "4.1.4",
                "sdist": {"name": "pyspark-4.1.4.tar.gz", "hashes": {"sha256": "b" * 64}},
            },
            {
                "name": "annotated_types",
                "version": "0.8.0",
                "wheels": [{"name": "a.whl", "hashes": {"sha256": "a" * 64}}],
            },
        ]
    }
    assert locking.requirement_lines(pylock) == [
        f"annotated-types==0.8.0 \\\n    --hash=sha256:{'a' * 64}",
        f"pyspark==4.1.4 \\\n    --hash=sha256:{'b' * 64}",
    ]


def test_reading_pins_normalizes_names_and_skips_hashes_and_comments(tmp_path: Path) -> None:
    lock = tmp_path / "requirements.lock"
    lock.write_text(f"# header\nPyYAML==6.0.4 \\\n    --hash=sha256:{'c' * 64}\n")
    assert locking.read_pins(lock) == {"pyyaml": "6.0.4"}
    lock.write_text("pyyaml>=6\n")
    with pytest.raises(ValueError, match="expected name==version, found 'pyyaml>=6'"):
        locking.read_pins(lock)
