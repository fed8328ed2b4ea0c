"""The function-length check that `make lint` runs over the packages."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "devtools" / "check_function_length.py"


@pytest.fixture(scope="module")
def checker() -> ModuleType:
    spec = importlib.util.spec_from_file_location("check_function_length", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_function_over_the_limit_is_reported(checker: ModuleType, tmp_path: Path) -> None:
    body = "\n".join(f"    x{i} = {i}" for i in range(45))
    (tmp_path / "long.py").write_text(f"def too_long():\n{body}\n\ndef short():\n    return 1\n")
    assert list(checker.long_functions((tmp_path / "long.py").read_text(), 40)) == [
        (1, "too_long", 46)
    ]
    assert checker.main(["--limit", "40", str(tmp_path)]) == 1


def test_methods_count_and_short_code_passes(checker: ModuleType, tmp_path: Path) -> None:
    (tmp_path / "ok.py").write_text("class A:\n    def m(self):\n        return 2\n")
    assert checker.main([str(tmp_path)]) == 0
    assert list(checker.long_functions("class A:\n    def m(self):\n        pass\n", 1)) == [
        (2, "m", 2)
    ]
