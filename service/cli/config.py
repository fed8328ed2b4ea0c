"""`dstreams config validate|show|schema`: check, display and describe a configuration."""

from __future__ import annotations

import json
from pathlib import Path

import click
import yaml

from service.cli.app_dir import app_dir_option, use_app_dir
from service.config.problems import InvalidConfig
from service.config.settings import Settings, json_schema, load_settings
from service.errors import ConfigError

# Exit code of an invalid configuration, as for a usage error: fix the input and run again.
EXIT_INVALID = 2

config_option = click.option(
    "--config",
    "config_path",
    type=click.Path(dir_okay=False, path_type=Path),
    envvar="DSTREAMS_CONFIG",
    help="YAML configuration file (env: DSTREAMS_CONFIG). DSTREAMS_A__B variables override it.",
)


@click.group("config")
def config() -> None:
    """Check, show and describe dstreams configuration.

    A job's YAML file is layered over config/defaults.yaml, and DSTREAMS_A__B environment
    variables over both (DSTREAMS_HTTP__PORT=9000 sets http.port; lists and maps as JSON).

    \b
    Examples:
      dstreams config validate --config config/wordcount.yaml
      DSTREAMS_KAFKA__BOOTSTRAP_SERVERS=kafka:9092 dstreams config show --config job.yaml
      dstreams config show --config job.yaml --format json
      dstreams config schema > dstreams.schema.json
    """


@config.command()
@config_option
@app_dir_option
def validate(config_path: Path | None, app_dir: Path) -> None:
    """Print `ok`, or one line per problem and exit with status 2.

    The job's module is imported as `dstreams run` would (from --app-dir, the working directory,
    first) and must have the function `job` names.

    \b
    Example:
      $ dstreams config validate --config job.yaml
      sinks.counts.type: 'kafak' is not one of kafka, postgres, files, console
    """
    from service.driver.preflight import load_job

    use_app_dir(app_dir)
    settings = load_or_exit(config_path)
    try:
        load_job(settings.job)
    except ConfigError as error:
        click.echo(str(error), err=True)
        raise click.exceptions.Exit(EXIT_INVALID) from None
    click.echo("ok")


@config.command()
@config_option
@click.option(
    "--format",
    "output_format",
    type=click.Choice(["yaml", "json"]),
    default="yaml",
    show_default=True,
    help="Output format.",
)
def show(config_path: Path | None, output_format: str) -> None:
    """Print the effective configuration (defaults, file and environment merged).

    Secrets (passwords, DSNs, secret_properties) are shown as '**********'.

    \b
    Example:
      dstreams config show --config job.yaml --format json
    """
    data = load_or_exit(config_path).masked_dict()
    if output_format == "json":
        click.echo(json.dumps(data, indent=2))
    else:
        click.echo(yaml.safe_dump(data, sort_keys=False, default_flow_style=False), nl=False)


@config.command()
def schema() -> None:
    """Print the JSON Schema of the configuration file (for editors and CI checks).

    \b
    Example:
      dstreams config schema > dstreams.schema.json
    """
    click.echo(json.dumps(json_schema(), indent=2))


def load_or_exit(path: Path | None) -> Settings:
    """The settings, or each problem printed to stderr and exit status 2 (no traceback)."""
    try:
        return load_settings(path)
    except InvalidConfig as exc:
        problems: tuple[str, ...] = exc.problems
    except ConfigError as exc:
        problems = (str(exc),)
    for problem in problems:
        click.echo(problem, err=True)
    raise click.exceptions.Exit(EXIT_INVALID)


# `dstreams run` imported the helper under its first, private name.
