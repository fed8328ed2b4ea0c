"""Variables set in this process's environment for the length of a `with` block."""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager


@contextmanager
def patched_environ(values: Mapping[str, str]) -> Iterator[None]:
    """Set `values` in os.environ for the duration, then restore each variable as it was (or
    remove it, where it was not set)."""
    saved = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
