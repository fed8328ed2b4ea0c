"""The `dstreams` command line. Each command group lives in its own module and is added here."""

from __future__ import annotations

import click

from service import __version__


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def cli() -> None:
    """dstreams: exactly-once Discretized Streams on PySpark, fed by Kafka.

    \b
    Examples:
      dstreams run --config config/wordcount.yaml
      dstreams dev kafka --brokers 3
      dstreams demo
    """


@cli.command()
def version() -> None:
    """Print the dstreams version."""
    click.echo(__version__)


def _register_groups() -> None:
    # Imported here so that a broken optional group cannot stop `dstreams --help` from loading.
    from service.cli_dev import dev

    cli.add_command(dev)


def main() -> None:
    _register_groups()
    cli()
