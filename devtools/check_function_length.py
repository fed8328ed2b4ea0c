"""Fails when a function in the packages is longer than the limit (docs/architecture.md,
"Packages and layers").

Long functions are where this field's codebases hide their problems; the limit keeps each step
of the batch lifecycle, recovery and the sinks small enough to read and test on its own.
Usage: `python devtools/check_function_length.py [--limit N] [PATH ...]`.
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections.abc import Iterator
from pathlib import Path

DEFAULT_LIMIT = 40
DEFAULT_PATHS = ("service", "connectors", "sinks")


def long_functions(source: str, limit: int) -> Iterator[tuple[int, str, int]]:
    """(line, name, length) of every function or method longer than `limit` lines.

    >>> list(long_functions("def f():\\n    return 1\\n", limit=1))
    [(1, 'f', 2)]
    """
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            length = (node.end_lineno or node.lineno) - node.lineno + 1
            if length > limit:
                yield node.lineno, node.name, length


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--limit", type=int, default=DEFAULT_LIMIT)
    parser.add_argument("paths", nargs="*", default=list(DEFAULT_PATHS))
    args = parser.parse_args(argv)
    found = 0
    for root in args.paths:
        for path in sorted(Path(root).rglob("*.py")):
            for line, name, length in long_functions(path.read_text(), args.limit):
                print(f"{path}:{line}: {name} is {length} lines (limit {args.limit}); split it")
                found += 1
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
