"""The `dstreams` command line. Each command group lives in its own module and is added here."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from service import __version__
from service.cli.app_dir import app_dir_option, use_app_dir
from service.cli.config import config_option

if TYPE_CHECKING:
    from service.config.settings import Settings

# The image leaves service.dev out (Dockerfile): there `dstreams dev` and `dstreams demo` say so,
# instead of failing on an import.
DEV_TOOLING_MISSING = (
    "`dstreams {command}` needs the development tooling (service.dev: local Kafka, Spark, "
    "PostgreSQL and images), which is not installed here: the dstreams image leaves it out. "
    "Run it from a checkout of the repository (pip install -e '.[dev]')."
)


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
      dstreams check --config config/wordcount.yaml
      dstreams journal show --file state/journal
      dstreams init clicks
      dstreams class-archive
      dstreams dev kafka --brokers 3       # from a checkout, not in the image
      dstreams demo                        # from a checkout, not in the image
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
    if not dev_tooling_installed():
        raise click.ClickException(DEV_TOOLING_MISSING.format(command="demo"))
    from service.cli.demo import run_demo

    sys.exit(run_demo(seconds, rate))


def dev_tooling_installed() -> bool:
    """Whether service.dev is installed: in a checkout or a pip install, not in the image."""
    return importlib.util.find_spec("service.dev") is not None


def dev_command(installed: bool) -> click.Command:
    """`dstreams dev`: the development tooling's group, or where it is not installed a command
    of the same name that says so, whatever it is given (`--help` included)."""
    if installed:
        from service.cli.dev import dev

        return dev

    @click.command(
        "dev",
        context_settings={"ignore_unknown_options": True, "allow_extra_args": True},
        add_help_option=False,
        short_help="Local services for development (not installed here).",
    )
    def dev_not_installed() -> None:
        raise click.ClickException(DEV_TOOLING_MISSING.format(command="dev"))

    return dev_not_installed


def _register_groups() -> None:
    # Imported here so that a broken optional group cannot stop `dstreams --help` from loading.
    from service.cli.audit import audit
    from service.cli.check import check
    from service.cli.checkpoint import checkpoint
    from service.cli.class_archive import class_archive
    from service.cli.config import config
    from service.cli.executor import executor
    from service.cli.ingest import ingest
    from service.cli.init import init
    from service.cli.journal import journal

    cli.add_command(config)
    cli.add_command(ingest)
    cli.add_command(journal)
    cli.add_command(checkpoint)
    cli.add_command(audit)
    cli.add_command(check)
    cli.add_command(class_archive)
    cli.add_command(dev_command(dev_tooling_installed()))
    cli.add_command(executor)
    cli.add_command(init)


def main() -> None:
    if sys.argv[1:2] == ["run"]:
        from service.cli.hash_seed import restart_with_hash_seed

        restart_with_hash_seed()
    _register_groups()
    cli()
