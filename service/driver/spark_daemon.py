"""The Python daemon of Spark executors: pyspark's own, without three costs it pays here.

Spark starts `python -m <spark.python.daemon.module>`, which forks one reusable worker per task
slot, with Spark's own archives first on the path: `pyspark.zip`, the py4j zip and Spark's core
jar. Measured on a 2-core machine:

1. Importing pyspark from `pyspark.zip` compiles its sources on every start, since a zip holds no
   cached bytecode: 1.2 s, against 0.3 s from the installed package. When the installed pyspark
   and py4j are the very versions of the zips, the zips are taken off the path. (A cluster whose
   executors lack the installed package keeps them.) Spark's jars hold no Python and go too.
2. Before every task, pyspark's worker calls `importlib.invalidate_caches()`, and on Python 3.11
   every zip importer then re-reads its zip's directory: about 0.1 s of CPU per task for the
   5,000-entry jar alone. A zip on the path does not change while a worker lives (files Spark
   adds later come under new paths, with new importers), so zip importers keep their directory.
   A 4-task job fell from 0.48 s to 0.2 s.
3. After every task the daemon runs a full `gc.collect()`. Freezing what the daemon imported
   before it forks keeps those long-lived objects out of every collection.

And one message: when the SparkContext stops it closes its workers' sockets, and over Unix
sockets (`service.driver.spark.BASE_CONF`) a worker still writing gets EPIPE at once; pyspark's
daemon printed that as a traceback into the driver's log on graceful stops. A worker whose
connection Spark closed now says so in one line and exits.
"""

from __future__ import annotations

import gc
import importlib.machinery
import os
import re
import sys
import zipfile
import zipimport
from collections.abc import Callable
from pathlib import Path
from typing import Any

_PY4J_ZIP = re.compile(r"py4j-(?P<version>[\w.]+)-src\.zip")
_VERSION = re.compile(r"""__version__(?::\s*str)?\s*=\s*["'](?P<version>[^"']+)["']""")


def _keep_zip_directory(_importer: zipimport.zipimporter) -> None:
    """A zip on the workers' path does not change while they live; nothing to re-read."""


def _version_in(text: str) -> str | None:
    found = _VERSION.search(text)
    return found.group("version") if found else None


def _installed_version(package: str, version_file: str, path: list[str]) -> str | None:
    """The version of `package` as installed on `path` (archives excluded), or None."""
    spec = importlib.machinery.PathFinder.find_spec(package, path)
    if spec is None or not spec.submodule_search_locations:
        return None
    location = Path(next(iter(spec.submodule_search_locations))) / version_file
    try:
        return _version_in(location.read_text())
    except OSError:
        return None


def _archive_version(entry: str) -> tuple[str, str | None] | None:
    """`(package, version)` of one of Spark's Python archives on the path, else None."""
    name = os.path.basename(entry)
    if name == "pyspark.zip":
        try:
            with zipfile.ZipFile(entry) as archive:
                return "pyspark", _version_in(archive.read("pyspark/version.py").decode())
        except (OSError, KeyError, zipfile.BadZipFile):
            return "pyspark", None
    matched = _PY4J_ZIP.fullmatch(name)
    return ("py4j", matched.group("version")) if matched else None


def spark_archives_to_drop(path: list[str]) -> list[str]:
    """The entries of `path` whose modules the installed packages provide, version for version."""
    plain = [entry for entry in path if not entry.endswith((".zip", ".jar", ".egg"))]
    installed = {
        "pyspark": _installed_version("pyspark", "version.py", plain),
        "py4j": _installed_version("py4j", "version.py", plain),
    }
    dropped = [entry for entry in path if entry.endswith(".jar")]
    for entry in path:
        archive = _archive_version(entry)
        if archive is not None and archive[1] is not None and installed[archive[0]] == archive[1]:
            dropped.append(entry)
    return dropped


def prefer_installed_packages() -> None:
    for entry in spark_archives_to_drop(sys.path):
        sys.path.remove(entry)
        sys.path_importer_cache.pop(entry, None)


Worker = Callable[[Any, bool], int]


def quiet_when_spark_hangs_up(worker: Worker) -> Worker:
    """pyspark's loop of one reused worker, ending with one line instead of a traceback when
    Spark has closed the worker's connection: the JVM gave up on the task first, so nothing is
    lost, and a non-zero code makes the daemon let the worker exit."""

    def run(sock: Any, authenticated: bool) -> int:
        try:
            return worker(sock, authenticated)
        except (BrokenPipeError, ConnectionResetError) as error:
            print(
                f"dstreams: Python worker {os.getpid()} exits: Spark closed its connection "
                f"({error.strerror}; the SparkContext stopped or the task was cancelled)",
                file=sys.stderr,
                flush=True,
            )
            return 1

    return run


def main() -> None:
    prefer_installed_packages()
    zipimport.zipimporter.invalidate_caches = _keep_zip_directory  # type: ignore[assignment]
    from pyspark import daemon

    daemon.worker = quiet_when_spark_hangs_up(daemon.worker)
    # A failed flush after a task means the same hang-up: raise it (to the line above) rather
    # than print another traceback and keep a worker whose connection is gone.
    os.environ.setdefault("PYTHON_DAEMON_KILL_WORKER_ON_FLUSH_FAILURE", "1")
    gc.collect()
    gc.freeze()
    daemon.manager()


if __name__ == "__main__":
    main()
