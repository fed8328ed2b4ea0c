"""`FileIn`: a file or folder the development tooling keeps under one of an object's directories.

A local engine, broker or secured cluster keeps its files under one directory; declaring each
one as `pidfile = FileIn("run_dir", "dockerd.pid")` lists them together, in one line each.

>>> from dataclasses import dataclass
>>> @dataclass
... class Server:
...     home: Path
...     log = FileIn("home", "server.log")
>>> Server(Path("/tmp/s")).log
PosixPath('/tmp/s/server.log')
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, overload


class FileIn:
    """The path `name` inside the directory its owner holds in the attribute `directory`."""

    def __init__(self, directory: str, name: str) -> None:
        self.directory = directory
        self.name = name

    @overload
    def __get__(self, instance: None, owner: type[Any]) -> FileIn: ...

    @overload
    def __get__(self, instance: object, owner: type[Any]) -> Path: ...

    def __get__(self, instance: object | None, owner: type[Any]) -> FileIn | Path:
        if instance is None:
            return self
        directory: Path = getattr(instance, self.directory)
        return directory / self.name
