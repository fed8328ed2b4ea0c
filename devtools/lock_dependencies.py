"""Writes the lock files the image installs from: every distribution pinned, with its hash.

- `requirements.lock`: the runtime dependencies of pyproject.toml and everything they pull in;
- `requirements-build.lock`: pip and the build backend (pyproject.toml's `[build-system]`), which
  the image installs first, so that the project and pyspark (an sdist) are built by pinned tools
  too.

Both are in pip's `--require-hashes` format, for CPython 3.11 on linux x86_64 with glibc 2.36 (the
image's Debian bookworm), so this script refuses to run anywhere else: pip picks the wheels for
the interpreter and machine it runs on. It asks pip's own (experimental) `pip lock` to resolve,
and rewrites the PEP 751 pylock.toml that writes: one `name==version` line per distribution,
with the sha256 of each file pip chose for it.

Usage: `python devtools/lock_dependencies.py` after changing a dependency in pyproject.toml;
tests/unit/test_dependency_lock.py fails until the locks pin every dependency within its range.
"""

from __future__ import annotations

import platform
import subprocess
import sys
import tempfile
import tomllib
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = ROOT / "pyproject.toml"
RUNTIME_LOCK = ROOT / "requirements.lock"
BUILD_LOCK = ROOT / "requirements-build.lock"
COMMAND = "python devtools/lock_dependencies.py"
# The image's interpreter and machine (Dockerfile: python 3.11 on Debian bookworm).
TARGET = ("CPython", (3, 11), "Linux", "x86_64")


def runtime_requirements(pyproject: Mapping[str, Any]) -> list[str]:
    return list(pyproject["project"]["dependencies"])


def build_requirements(pyproject: Mapping[str, Any]) -> list[str]:
    return ["pip", *pyproject["build-system"]["requires"]]


def read_pins(lock: Path) -> dict[str, str]:
    """A lock file's pins: normalized distribution name -> version."""
    pins: dict[str, str] = {}
    for line in lock.read_text().splitlines():
        requirement = line.split("#", 1)[0].strip().removesuffix("\\").strip()
        if not requirement or requirement.startswith("--"):
            continue
        name, separator, version = requirement.partition("==")
        if not separator:
            msg = f"{lock.name}: expected name==version, found {requirement!r}; run {COMMAND}"
            raise ValueError(msg)
        pins[normalize(name)] = version.strip()
    return pins


def normalize(name: str) -> str:
    """A distribution name as PEP 503 compares them (PyYAML, pyyaml and py_yaml are one)."""
    return "-".join(name.replace("_", "-").replace(".", "-").lower().split("-")).strip("-")


def requirement_lines(pylock: Mapping[str, Any]) -> list[str]:
    """pylock.toml's packages as `--require-hashes` lines, sorted by name."""
    lines = []
    for package in sorted(pylock.get("packages", []), key=lambda p: normalize(p["name"])):
        files = [*package.get("wheels", []), *([package["sdist"]] if "sdist" in package else [])]
        hashes = sorted({file["hashes"]["sha256"] for file in files})
        if not hashes:
            msg = f"pip lock gave no sha256 for {package['name']} {package['version']}"
            raise ValueError(msg)
        pinned = f"{normalize(package['name'])}=={package['version']}"
        lines.append(" \\\n".join([pinned, *(f"    --hash=sha256:{h}" for h in hashes)]))
    return lines


def header(what: str) -> str:
    return (
        f"# {what}, pinned with hashes for CPython 3.11 on linux x86_64 (the image).\n"
        f"# Written by `{COMMAND}` from pyproject.toml: do not edit by hand.\n"
    )


def lock(requirements: Iterable[str]) -> list[str]:
    """Resolve `requirements` with `pip lock` on this interpreter; the lines to write."""
    with tempfile.TemporaryDirectory() as tmp:
        output = Path(tmp) / "pylock.toml"
        command = [sys.executable, "-m", "pip", "lock", "--quiet", "--output", str(output)]
        result = subprocess.run(  # noqa: S603 - our own interpreter, fixed arguments
            [*command, *requirements], capture_output=True, text=True, check=False
        )
        if result.returncode != 0:
            msg = f"pip lock exited with {result.returncode}:\n{result.stderr[-3000:]}"
            raise SystemExit(msg)
        return requirement_lines(tomllib.loads(output.read_text()))


def check_target() -> None:
    found = (
        platform.python_implementation(),
        sys.version_info[:2],
        platform.system(),
        platform.machine(),
    )
    if found != TARGET:
        msg = f"expected to run on {TARGET} to lock for the image, found {found}"
        raise SystemExit(msg)


def main() -> int:
    check_target()
    pyproject = tomllib.loads(PYPROJECT.read_text())
    for path, what, requirements in (
        (RUNTIME_LOCK, "The runtime dependencies", runtime_requirements(pyproject)),
        (BUILD_LOCK, "pip and the build backend", build_requirements(pyproject)),
    ):
        path.write_text(header(what) + "".join(f"{line}\n" for line in lock(requirements)))
        print(f"{path.relative_to(ROOT)}: {len(read_pins(path))} distributions")
    return 0


if __name__ == "__main__":
    sys.exit(main())
