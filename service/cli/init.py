"""`dstreams init NAME`: a new job's project, ready to test, run and build into an image."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import click

from service import __version__
from service.cli.project_template import project_files

EXIT_EXISTS = 1
EXIT_BAD_NAME = 2
# The project's name becomes its app_id (service/config/types.py: letters, digits, '-', '_') and,
# with '-' as '_', its module's name: so it starts with a letter.
_PROJECT_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_-]{0,99}")


@click.command()
@click.argument("path", metavar="NAME", type=click.Path(path_type=Path))
def init(path: Path) -> None:
    """Create a new project NAME: a job, its config, a test and a Dockerfile.

    \b
    NAME is a folder to create (its last part names the project, its app_id and its job's
    module, NAME_job.py). Writes:
      NAME_job.py               the job: build(ctx) reads source `lines`, writes `counts`
      job.yaml                  its config (Kafka source, files sink, file journal)
      tests/test_NAME_job.py    a test on the pytest plugin's fast path (no broker)
      pyproject.toml            pytest's settings
      Dockerfile, .dockerignore the job on the dstreams image, as the Helm chart runs it
      README.md                 how to test, run, build the image and deploy it

    \b
    Exit codes: 0 created; 1 the folder exists already (nothing is written); 2 NAME is not a
    project name (a letter, then up to 99 letters, digits, '-' or '_').

    \b
    Example:
      dstreams init clicks && cd clicks && pytest
    """
    module = _module_of(path.name)
    _create_folder(path)
    for relative, text in project_files(path.name, module, __version__).items():
        target = path / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    click.echo(f"created {path}/ with job {module}:build; test it with: cd {path} && pytest")


def _module_of(name: str) -> str:
    """The job module's name for project `name`; exits 2 if `name` is not a project name."""
    if not _PROJECT_NAME.fullmatch(name):
        click.echo(
            f"dstreams init: {name!r} is not a project name; expected a letter, then up to 99 "
            "letters, digits, '-' or '_' (it becomes the app_id and the job's module name)",
            err=True,
        )
        sys.exit(EXIT_BAD_NAME)
    # `_job` keeps the module from shadowing a package of the same name (json, service, ...).
    return f"{name.replace('-', '_').lower()}_job"


def _create_folder(path: Path) -> None:
    """Creates the project's folder, or exits 1 if it exists: nothing is ever overwritten."""
    try:
        path.mkdir(parents=True)
    except FileExistsError:
        click.echo(
            f"dstreams init: {path} exists already; expected a new folder, so nothing was "
            "written: choose another NAME or move the folder away",
            err=True,
        )
        sys.exit(EXIT_EXISTS)
