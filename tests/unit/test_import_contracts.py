"""The layers of docs/architecture.md are enforced: the tree keeps them, and a broken one fails.

A copy of the packages gets one forbidden import per contract planted in it, and one run of
`lint-imports` over that copy must name each planted import under the contract that forbids it
(one run, because building the import graph is most of the second each run takes).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"
PACKAGES = ("service", "connectors", "sinks")


@dataclass(frozen=True)
class Plant:
    """An import that a contract forbids, appended to `module` of the copy."""

    module: str
    imported: str
    contract: str  # the start of the contract's name in pyproject.toml
    evidence: str = ""  # what the contract's report says; by default, the planted import

    def path_in(self, tree: Path) -> Path:
        """The module's file in `tree`: a package's ``__init__.py``, else ``<module>.py``."""
        package = tree.joinpath(*self.module.split("."))
        return package / "__init__.py" if package.is_dir() else package.with_suffix(".py")

    @property
    def report_says(self) -> str:
        return self.evidence or f"{self.module} -> {self.imported} (l."


PLANTS = (
    Plant("connectors.planner", "sinks.kafka", "connectors import nothing of sinks"),
    Plant("service.dev.ports", "service.driver.engine", "service.dev, the development tooling"),
    Plant("service.graph.functions", "sinks.postgres", "graph and journal know sinks only"),
    Plant("service.testing", "service.cli", "service layers:"),
    Plant("service.graph.event_functions", "service.driver.engine", "service layers:"),
    Plant("sinks.files", "service.graph.context", "sinks and connectors import only the leaf"),
    Plant("service.observe.status", "sinks.files", "observation imports no sink itself"),
    Plant("service.driver.recovery", "service.dev.ports", "the running service never imports"),
    Plant("service.cli.ingest", "service.dev.ports", "the CLI imports service.dev only in"),
    Plant("service.faults", "service.ingest.app", "the leaf modules import nothing"),
    Plant("service.durable", "service.journal.base", "the leaf modules import nothing"),
    # A cycle's report names the cheapest edge to remove, not necessarily the planted one.
    Plant(
        "connectors.offsets",
        "connectors.planner",
        "no import cycles",
        evidence="No cycles are allowed in connectors.",
    ),
)


@dataclass(frozen=True)
class Report:
    """What one `lint-imports` run said: its exit code, each contract's verdict and, for each
    broken contract, the text that explains it."""

    returncode: int
    output: str
    verdicts: dict[str, str]
    explanations: dict[str, str]

    def contract_named(self, start: str) -> str:
        names = [name for name in self.verdicts if name.startswith(start)]
        assert len(names) == 1, f"expected one contract named {start!r}..., found {names}"
        return names[0]


def contract_names(tree: Path) -> list[str]:
    config = tomllib.loads((tree / "pyproject.toml").read_text())
    return [contract["name"] for contract in config["tool"]["importlinter"]["contracts"]]


def lint_imports(tree: Path) -> Report:
    result = subprocess.run(  # noqa: S603 - our own venv's lint-imports on a tree we made
        [str(LINT_IMPORTS), "--no-logo", "--no-cache", str(tree / "pyproject.toml")],
        cwd=tree,
        # Wide columns: lint-imports wraps its lines at the terminal width, names included.
        env={"PYTHONPATH": str(tree), "PATH": os.defpath, "COLUMNS": "1000"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    output = result.stdout + result.stderr
    names = contract_names(tree)
    return Report(result.returncode, output, verdicts(output, names), explanations(output, names))


def verdicts(output: str, names: list[str]) -> dict[str, str]:
    """`KEPT` or `BROKEN` for each contract, from the summary lines `<name> KEPT (...)`."""
    found = {}
    for line in output.splitlines():
        for name in names:
            verdict = line.removeprefix(name).split()
            if line.startswith(name) and verdict and verdict[0] in ("KEPT", "BROKEN"):
                found[name] = verdict[0]
    return found


def explanations(output: str, names: list[str]) -> dict[str, str]:
    """Each broken contract's section: its name underlined with dashes, then the imports."""
    lines = output.splitlines()
    starts = [
        (index, lines[index])
        for index in range(len(lines) - 1)
        if lines[index] in names and set(lines[index + 1]) == {"-"}
    ]
    bounds = [index for index, _ in starts] + [len(lines)]
    return {name: "\n".join(lines[start : bounds[n + 1]]) for n, (start, name) in enumerate(starts)}


def copy_tree(destination: Path) -> Path:
    """The packages and the contracts, copied so that a test can break them."""
    for package in PACKAGES:
        ignore = shutil.ignore_patterns("*.pyc", "__pycache__")
        shutil.copytree(ROOT / package, destination / package, ignore=ignore)
    shutil.copy(ROOT / "pyproject.toml", destination / "pyproject.toml")
    return destination


@pytest.fixture(scope="module")
def planted_report(tmp_path_factory: pytest.TempPathFactory) -> Report:
    tree = copy_tree(tmp_path_factory.mktemp("planted"))
    for plant in PLANTS:
        module = plant.path_in(tree)
        module.write_text(module.read_text() + f"\nimport {plant.imported}  # noqa\n")
    return lint_imports(tree)


def test_the_tree_keeps_every_contract() -> None:
    report = lint_imports(ROOT)
    assert report.returncode == 0, report.output
    assert set(report.verdicts.values()) == {"KEPT"}, report.output
    assert sorted(report.verdicts) == sorted(contract_names(ROOT)), report.output


def test_an_unchanged_copy_keeps_every_contract(tmp_path: Path) -> None:
    """The copy alone passes, so what breaks in the planted copy is what was planted."""
    report = lint_imports(copy_tree(tmp_path))
    assert report.returncode == 0, report.output
    assert set(report.verdicts.values()) == {"KEPT"}, report.output


@pytest.mark.parametrize("plant", PLANTS, ids=lambda plant: f"{plant.module}->{plant.imported}")
def test_a_planted_import_breaks_the_contract_that_forbids_it(
    planted_report: Report, plant: Plant
) -> None:
    contract = planted_report.contract_named(plant.contract)
    assert planted_report.returncode != 0
    assert planted_report.verdicts[contract] == "BROKEN", planted_report.output
    assert plant.report_says in planted_report.explanations[contract], planted_report.output


def test_every_contract_is_broken_by_some_plant() -> None:
    """A contract added later gets a plant here too, or this fails."""
    planted = {plant.contract for plant in PLANTS}
    unplanted = [
        name
        for name in contract_names(ROOT)
        if not any(name.startswith(start) for start in planted)
    ]
    assert unplanted == []


def placed_modules(tree: Path) -> set[str]:
    """The modules that some contract constrains: a forbidden contract's sources, a layer."""
    config = tomllib.loads((tree / "pyproject.toml").read_text())
    placed: set[str] = set()
    for contract in config["tool"]["importlinter"]["contracts"]:
        placed.update(contract.get("source_modules", []))
        for layer in contract.get("layers", []):
            placed.update(name.strip() for name in layer.split("|"))
    return placed


def test_every_part_of_service_is_placed_by_a_contract() -> None:
    """A new sub-package or top-level module of service gets a place in the layers or a rule of
    its own; `__main__` is the entry point, above everything."""
    parts = {
        f"service.{path.stem}"
        for path in (ROOT / "service").iterdir()
        if path.suffix == ".py" or (path / "__init__.py").is_file()
    }
    unplaced = parts - placed_modules(ROOT) - {"service.__init__", "service.__main__"}
    assert sorted(unplaced) == []
