"""`--app-dir`: where the commands that import the job (`job: module:function`) look for it.

`python -m service run` finds a job module in the working directory because `python -m` puts that
directory first on `sys.path`; the `dstreams` console script does not, so a job beside the config
(`examples.wordcount` in a checkout) would not import. Every command that imports the job puts
`--app-dir` (default: the working directory, as uvicorn's option does) first on the import path,
and on `PYTHONPATH` for the processes it starts: in local mode Spark's Python workers, which
unpickle the job's functions by reference, are started by the JVM with this environment.
"""

from __future__ import annotations

import os
import sys
from collections.abc import MutableMapping
from pathlib import Path

import click

app_dir_option = click.option(
    "--app-dir",
    "app_dir",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    default=".",
    show_default=True,
    envvar="DSTREAMS_APP_DIR",
    help="Directory to import the job's module from, ahead of installed packages (env: "
    "DSTREAMS_APP_DIR). Default: the working directory, as `python -m` does.",
)


def use_app_dir(
    directory: Path,
    path: list[str] | None = None,
    environ: MutableMapping[str, str] | None = None,
) -> str:
    """Puts `directory` first on `path` (`sys.path`) and on `PYTHONPATH` in `environ`
    (`os.environ`), unless it is there already; returns it as an absolute path.

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
