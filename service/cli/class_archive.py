"""`dstreams class-archive`: the driver JVM's class-data sharing archive.

A runtime command, not a development one: the image builds its archive with it (Dockerfile), where
the development tooling (`dstreams dev`) is not installed. `dstreams dev class-archive` names the
same command, for the Makefile and for habit.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import click

from service.driver import class_archive as jvm_archive


@click.command("class-archive")
@click.option(
    "--path",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Where to write it (default: where spark.class_archive: auto looks).",
)
@click.option("--if-missing", is_flag=True, help="Do nothing when the archive is already there.")
def class_archive(path: Path | None, if_missing: bool) -> None:
    """Build the driver JVM's class-data sharing archive: Spark then starts about a second
    faster (spark.class_archive). Runs a short local Spark job twice (about 20 s).

    \b
    Example:
      dstreams class-archive
    """
    target = path or jvm_archive.default_path()
    if if_missing and target.is_file():
        click.echo(f"{target} (already there)")
        return
    click.echo("Building the JVM class archive (a short local Spark job, twice)...", err=True)
    try:
        click.echo(jvm_archive.build(target))
    except (jvm_archive.ClassArchiveError, OSError, subprocess.TimeoutExpired) as error:
        msg = f"{error}; Spark still starts without it, only slower"
        raise click.ClickException(msg) from error
