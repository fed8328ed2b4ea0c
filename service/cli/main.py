"""The `dstreams` command line. Each command group lives in its own module and is added here."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from service import __version__
from service.cli.app_dir import app_dir_option, use_app_dir
from service.cli.config import config_option

if TYPE_CHECKING:
    from service.config.settings import Settings


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(
    __version__, "--version", prog_name="dstreams", message="%(prog)s %(version)s"
)
def cli() -> None:
    """dstreams: exactly-once Discretized Streams on PySpark, fed by Kafka.

    \b
    Examples:
      dstreams run --config config/wordcount.yaml
      dstreams ingest --config config/wordcount.yaml
      dstreams config validate --config config/wordcount.yaml
      dstreams journal show --file state/journal
      dstreams dev kafka --brokers 3
      dstreams demo
      dstreams --version
    """


@cli.command()
def version() -> None:
    """Print the dstreams version.

    \b
    Example:
      $ dstreams version
      0.1.0
    """
    click.echo(__version__)


@cli.command()
@config_option
@app_dir_option
@click.option(
    "--standby",
    is_flag=True,
    help="Warm standby: start Spark and the job, then wait until elected before taking over "
    "the journal (sets standby.enabled; give every driver of the app the same flag).",
)
def run(config_path: Path | None, app_dir: Path, standby: bool) -> None:
    """Run a job as a long-lived service until SIGTERM/SIGINT.

    \b
    Recovers from the journal first (replaying batches a crashed driver left unfinished), then
    runs one batch per interval. With ingest.enabled the ingest endpoint (see `dstreams ingest`)
    runs in the same process. The job's module is imported from --app-dir (the working
    directory) first. Exit codes: 0 graceful stop, 2 bad configuration, 3 fenced out by a
    newer driver, 4 refused to start (journal damaged, graph changed, offsets lost, topics
    under-replicated), 5 failed while running (a batch failed, a sink's server stayed down past
    its outage_limit_ms, or a volume is full, at start-up too; a restart replays it).

    \b
    Example:
      dstreams run --config config/wordcount.yaml
      dstreams run --config job.yaml --app-dir jobs/       # jobs/mine.py for job: mine:build
      dstreams run --config config/wordcount.yaml --standby   # on two hosts: one waits, warm
    """
    from service.cli.config import load_or_exit

    use_app_dir(app_dir)
    settings = load_or_exit(config_path)
    if standby:
        settings = settings.model_copy(
            update={"standby": settings.standby.model_copy(update={"enabled": True})}
        )
    sys.exit(serve(settings))


def serve(settings: Settings) -> int:
    """Runs the service; returns the exit code of what happened, with one line on stderr for
    anything but a graceful stop (codes: `service.driver.engine`, the README's table)."""
    from service.driver.engine import (
        EXIT_CONFIG,
        EXIT_FAILED,
        EXIT_REFUSED,
        FailedWhileRunning,
        run_service,
    )
    from service.errors import ConfigError, DiskFull, DStreamsError, SinkUnavailable
    from service.ingest.app import ingest_alongside

    try:
        with ingest_alongside(settings):
            return run_service(settings)
    except ConfigError as error:
        click.echo(f"configuration error: {error}", err=True)
        return EXIT_CONFIG
    except FailedWhileRunning as error:
        # The traceback is in the log; this says what stopped the service and what comes next.
        click.echo(
            f"dstreams failed while running: {error}; a restart replays the unfinished batch "
            "from the journal",
            err=True,
        )
        return EXIT_FAILED
    except SinkUnavailable as error:
        # At start-up too: a server that is down is a passing cause, not a refusal.
        click.echo(f"dstreams stopped, a sink was unavailable: {error}", err=True)
        return EXIT_FAILED
    except DiskFull as error:
        # At start-up too (the journal's epoch record): freeing space is all a restart needs.
        click.echo(f"dstreams stopped, disk full: {error}", err=True)
        return EXIT_FAILED
    except DStreamsError as error:
        # Journal damage, graph changes, lost offsets: what is wrong and what to do, no traceback.
        click.echo(f"dstreams refused to start: {type(error).__name__}: {error}", err=True)
        return EXIT_REFUSED


@cli.command()
@click.option("--seconds", default=30, show_default=True, help="How long to produce input.")
@click.option("--rate", default=2000, show_default=True, help="Lines per second to produce.")
def demo(seconds: int, rate: int) -> None:
    """Word count on a local Kafka it starts itself, then an exactly-once audit.

    \b
    Example:
      dstreams demo --seconds 30
    """
    from service.cli.demo import run_demo

    sys.exit(run_demo(seconds, rate))


def _register_groups() -> None:
    # Imported here so that a broken optional group cannot stop `dstreams --help` from loading.
    from service.cli.audit import audit
    from service.cli.checkpoint import checkpoint
    from service.cli.config import config
    from service.cli.dev import dev
    from service.cli.executor import executor
    from service.cli.ingest import ingest
    from service.cli.journal import journal

    cli.add_command(config)
    cli.add_command(ingest)
    cli.add_command(journal)
    cli.add_command(checkpoint)
    cli.add_command(audit)
    cli.add_command(dev)
    cli.add_command(executor)


def main() -> None:
    _register_groups()
    cli()
