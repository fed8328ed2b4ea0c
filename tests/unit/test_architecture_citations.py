"""Every citation of a section of docs/architecture.md names a heading it has.

Code and tests cite the map by a section's name after its path and a comma, bare or in double
quotes; a renamed heading or a misremembered name fails here.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ARCHITECTURE = ROOT / "docs" / "architecture.md"
# Where citations live: the packages, the tests and the tools, the chart, the top-level files.
CITING_FOLDERS = (
    "service",
    "connectors",
    "sinks",
    "tests",
    "devtools",
    "bench",
    "examples",
    "helm",
)
CITING_FILES = ("README.md", "Makefile", "Dockerfile", "pyproject.toml")
TEXT_SUFFIXES = frozenset({".py", ".md", ".yaml", ".yml", ".toml", ".sh", ".txt", ".tpl"})

# Built from parts, so that this file's own examples are not read as citations.
_CITED = re.escape("docs/architecture" + ".md") + ","
# After the comma (a line break and a comment's `#` allowed): one or more quoted names joined by
# `,` or `and`, or else a bare name running to the first closing bracket or punctuation.
_CITATION = re.compile(
    _CITED + r'\s+(?:#\s*)?("[^"\n]+"(?:(?:\s*,\s*|\s+and\s+)"[^"\n]+")*|[^"`\s][^)\n.:;,"`]*)'
)


def headings(markdown: str) -> set[str]:
    """The section names of a markdown page, without their `#`s and numbers (`## 3. Sinks`)."""
    pattern = re.compile(r"^#+\s+(?:\d+\.\s+)?(.+?)\s*$", re.MULTILINE)
    return {match.group(1) for match in pattern.finditer(markdown)}


def cited_sections(text: str) -> list[str]:
    """The section names that `text` cites."""
    names = []
    for match in _CITATION.finditer(text):
        cited = match.group(1)
        quoted = re.findall(r'"([^"]+)"', cited)
        names.extend(quoted or [cited.strip()])
    return names


def citing_files() -> list[Path]:
    found = [ROOT / name for name in CITING_FILES if (ROOT / name).is_file()]
    for folder in CITING_FOLDERS:
        found.extend(
            path
            for path in sorted((ROOT / folder).rglob("*"))
            if path.suffix in TEXT_SUFFIXES and path.is_file() and "__pycache__" not in path.parts
        )
    return found


def citations() -> list[tuple[str, str]]:
    """`(file, section)` for every citation in the tree."""
    return [
        (str(path.relative_to(ROOT)), section)
        for path in citing_files()
        for section in cited_sections(path.read_text(errors="replace"))
    ]


DOC = "docs/architecture" + ".md"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (f"(see {DOC}, The batch lifecycle), one step each", ["The batch lifecycle"]),
        (f'fencing ({DOC}, "Exactly-once"): a new driver', ["Exactly-once"]),
        (f'See {DOC}, "The journal" and "Sinks".', ["The journal", "Sinks"]),
        (f"# warm standby ({DOC},\n# Recovery). Needs", ["Recovery"]),
        (f"order ({DOC}, Tests):\n", ["Tests"]),
        (f"the map ({DOC}) and more", []),
    ],
)
def test_a_citation_is_read_with_its_section_names(text: str, expected: list[str]) -> None:
    assert cited_sections(text) == expected


def test_headings_drop_their_numbers() -> None:
    page = "# dstreams architecture\n\n## 3. The batch lifecycle\n\n### No silent loss\n"
    assert headings(page) == {"dstreams architecture", "The batch lifecycle", "No silent loss"}


def test_every_cited_section_of_the_architecture_exists() -> None:
    sections = headings(ARCHITECTURE.read_text())
    found = citations()
    assert len(found) > 10, f"expected the tree to cite the architecture page, found {found}"
    missing = [(where, section) for where, section in found if section not in sections]
    assert missing == [], f"sections cited but not headings of {ARCHITECTURE}: {sorted(sections)}"
