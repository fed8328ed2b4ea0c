"""`--app-dir`: where the commands that import the job (`job: module:function`) look for it.

`python -m service run` finds a job module in the working directory because `python -m` puts that
directory first on `sys.path`; the `dstreams` console script does not, so a job beside the config
(`examples.wordcount` in a checkout) would not import. Every command that imports the job puts
`--app-dir` (default: the working directory, as uvicorn's option does) first on the import path,
and on `PYTHONPATH` for the processes it starts: in local mode Spark's Python workers, which
unpickle the job's functions by reference, are started by the JVM with this environment.
"""

from __future__ import annotations

from pathlib import Path

import click

# The path handling itself lives below the CLI, where the test helpers' Spark can use it too.
from service.driver.job_code import use_app_dir

__all__ = ["app_dir_option", "use_app_dir"]

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
