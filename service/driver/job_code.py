"""Gets the job's code to a cluster's executors, and checks at start-up that they can run it.

Executors unpickle each task's functions by reference, so they must import the job's modules.
Where they share the driver's image the job is installed there (in site-packages) and nothing
needs shipping. Otherwise its top-level module or package is zipped at start-up and handed to
`SparkContext.addPyFile`, which puts it on every Python worker's path. Then one small job runs
an import of the job's module on the executors, so that a cluster that cannot run the job (no
executor comes, or they lack dstreams or the job) is refused at start-up with a message, not in
the first batch with a Python traceback from an executor's log.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import sysconfig
import threading
import zipfile
from collections.abc import Iterable, Iterator, MutableMapping
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Literal

from service.errors import ClusterError, ConfigError

ShipJob = Literal["auto", "always", "never"]
# dstreams' own packages: executors import them from the installed distribution, always.
OWN_PACKAGES = frozenset({"service", "connectors", "sinks"})
_CHECK_GROUP = "dstreams-executor-check"
# A fixed timestamp: the same sources give the same zip bytes, run after run.
_ZIP_TIME = (1980, 1, 1, 0, 0, 0)
_SKIPPED_DIRS = frozenset({"__pycache__", ".git", ".mypy_cache", ".pytest_cache", ".ruff_cache"})


@dataclass(frozen=True)
class JobCode:
    """The job's top-level module or package: its import name and where its source lies."""

    name: str
    path: Path

    @property
    def is_package(self) -> bool:
        return self.path.is_dir()


def job_code(job: str) -> JobCode:
    """Where the top-level module or package of `module:function` lies on this machine."""
    top = job.partition(":")[0].split(".")[0]
    spec = importlib.util.find_spec(top)
    if spec is None:
        msg = f"job {job!r}: expected module {top!r} to be importable, found nothing"
        raise ConfigError(msg)
    if spec.submodule_search_locations:
        return JobCode(top, Path(next(iter(spec.submodule_search_locations))))
    if spec.origin is None:
        msg = f"job {job!r}: module {top!r} has no source file to ship to executors"
        raise ConfigError(msg)
    return JobCode(top, Path(spec.origin))


def installed_locations() -> list[Path]:
    """The directories installed distributions live in (this interpreter's site-packages)."""
    paths = {sysconfig.get_paths()[key] for key in ("purelib", "platlib")}
    return [Path(path).resolve() for path in sorted(paths)]


def needs_shipping(code: JobCode, ship: ShipJob, installed: Iterable[Path]) -> bool:
    """`always`/`never` as said; `auto` ships unless the job is one of dstreams' own packages or
    lies under an installed location (executors that share the image have it)."""
    if ship != "auto":
        return ship == "always"
    if code.name in OWN_PACKAGES:
        return False
    resolved = code.path.resolve()
    return not any(resolved.is_relative_to(location) for location in installed)


def zip_job_code(code: JobCode, folder: Path) -> Path:
    """`<folder>/<name>.zip` holding the module or package (directory entries included, so a
    namespace package imports from it too); identical sources give identical bytes."""
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / f"{code.name}.zip"
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as archive:
        for arcname, source in _entries(code):
            info = zipfile.ZipInfo(arcname, date_time=_ZIP_TIME)
            if source is None:
                archive.writestr(info, b"")
            else:
                info.compress_type = zipfile.ZIP_DEFLATED
                archive.writestr(info, source.read_bytes())
    return target


def _entries(code: JobCode) -> Iterator[tuple[str, Path | None]]:
    """(name in the zip, file) pairs in a stable order; a None file is a directory entry."""
    if not code.is_package:
        yield code.path.name, code.path
        return
    base = code.path.parent
    for folder, dirs, files in os.walk(code.path):
        dirs[:] = sorted(d for d in dirs if d not in _SKIPPED_DIRS and not d.startswith("."))
        here = Path(folder)
        yield here.relative_to(base).as_posix() + "/", None
        for name in sorted(files):
            if not name.endswith((".pyc", ".pyo")):
                yield (here / name).relative_to(base).as_posix(), here / name


# --- the start-up check ------------------------------------------------------------------------


def import_on_executor(module: str, _index: int) -> str | None:
    """Executor side: None if `module` imports, else why not."""
    try:
        importlib.import_module(module)
    except Exception as error:  # reported to the driver, which refuses to start
        return f"{type(error).__name__}: {error}"
    return None


def check_executors(sc: Any, module: str, timeout_s: float, tasks: int = 2) -> None:
    """Runs `tasks` tasks that import `module` on the executors; `ClusterError` if none ran
    within `timeout_s` or an executor could not import it."""
    outcome: dict[str, Any] = {}

    def run() -> None:
        sc.setJobGroup(_CHECK_GROUP, "dstreams: can the executors import the job?", True)
        try:
            probe = partial(import_on_executor, module)
            outcome["errors"] = sc.parallelize(range(tasks), tasks).map(probe).collect()
        except Exception as error:  # a Py4JJavaError carrying the executor's traceback
            outcome["failure"] = error

    thread = threading.Thread(target=run, name="executor-check", daemon=True)
    thread.start()
    thread.join(timeout_s)
    if thread.is_alive():
        sc.cancelJobGroup(_CHECK_GROUP)
        raise ClusterError(_no_executor_message(sc, timeout_s))
    if "failure" in outcome:
        raise ClusterError(_failed_task_message(module, outcome["failure"]))
    failed = sorted({error for error in outcome["errors"] if error is not None})
    if failed:
        msg = (
            f"expected the executors to import the job's module {module!r}, but: "
            f"{'; '.join(failed)}. Install the job where the executors run (their image), or "
            "leave spark.ship_job at auto/always so that it is shipped to them"
        )
        raise ClusterError(msg)


def _no_executor_message(sc: Any, timeout_s: float) -> str:
    master = sc.master
    memory = sc.getConf().get("spark.executor.memory", "1g")
    return (
        f"expected an executor of {master} to run a first task within {timeout_s:.0f}s "
        "(spark.start_timeout_s), but none did. Check that the master has workers with a free "
        f"core and at least spark.executor.memory={memory} free, and that they can connect "
        f"back to the driver at {sc.getConf().get('spark.driver.host')} (spark.driver_host)"
    )


def _failed_task_message(module: str, failure: BaseException) -> str:
    text = str(failure)
    lines = [line.strip() for line in text.splitlines() if "Error" in line]
    cause = next((line for line in lines if "ModuleNotFoundError" in line), None)
    cause = cause or (lines[0] if lines else text[:300])
    return (
        f"expected the executors to run a Python task that imports the job's module {module!r}, "
        f"but it failed: {cause}. Executors need kafka-dstreams installed in the Python they run "
        f"({sys.executable} on the driver; the same image), and the job either installed there "
        "or shipped (spark.ship_job)"
    )


def prepare_executors(sc: Any, job: str, ship: ShipJob, workdir: Path, timeout_s: float) -> None:
    """On a cluster: ship the job's code if it needs shipping, then check the executors."""
    code = job_code(job)
    if needs_shipping(code, ship, installed_locations()):
        sc.addPyFile(str(zip_job_code(code, workdir)))
    check_executors(sc, job.partition(":")[0], timeout_s)


def use_app_dir(
    directory: Path,
    path: list[str] | None = None,
    environ: MutableMapping[str, str] | None = None,
) -> str:
    """Puts `directory` first on `path` (`sys.path`) and on `PYTHONPATH` in `environ`
    (`os.environ`), unless it is there already; returns it as an absolute path.

    Commands that import the job (`--app-dir`) and the pytest plugin's Spark use it: in local
    mode Spark's Python workers, which unpickle the job's functions by reference, are started by
    the JVM with this environment.

    >>> env = {"PYTHONPATH": "/opt/lib"}
    >>> search = ["/usr/lib/python3.11"]
    >>> use_app_dir(Path("/srv/jobs"), search, env)
    '/srv/jobs'
    >>> search, env["PYTHONPATH"]
    (['/srv/jobs', '/usr/lib/python3.11'], '/srv/jobs:/opt/lib')
    """
    path = sys.path if path is None else path
    environ = os.environ if environ is None else environ
    folder = str(directory.resolve())
    if folder not in path:
        path.insert(0, folder)
    entries = [entry for entry in environ.get("PYTHONPATH", "").split(os.pathsep) if entry]
    if folder not in entries:
        environ["PYTHONPATH"] = os.pathsep.join([folder, *entries])
    return folder
