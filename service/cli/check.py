"""`dstreams check`: everything the service checks at start-up, without starting it.

It runs the driver's own start-up steps (`service.driver.preflight`), one line each, going on
past a failure wherever a later step does not need the failed one, and exits with the code
`dstreams run` would have refused to start with. A CI step before a deploy, or a Helm
pre-upgrade hook (`dstreams check --config /etc/dstreams/config.yaml`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import click

from service.cli.app_dir import app_dir_option, use_app_dir
from service.cli.config import config_option, load_or_exit
from service.config.settings import Settings
from service.driver.preflight import BROKERS, STARTUP_CHECKS, Preflight, StartupCheck
from service.errors import ConfigError, DStreamsError

# The codes of `dstreams run` at start-up (service.driver.engine, the README's table), so that
# a check predicts the start: 0 it would start, 2 bad configuration, 4 it would refuse.
EXIT_OK = 0
EXIT_CRASHED = 1
EXIT_CONFIG = 2
EXIT_REFUSED = 4


@dataclass(frozen=True)
class Outcome:
    """One step's line: `status` is ok, warn, FAIL or skip."""

    name: str
    status: str
    detail: str
    exit_code: int = EXIT_OK


class _NoMetrics:
    def set_topic_under_replicated(self, topic: str, role: str, under: bool) -> None:
        """A check exports no metrics."""


@click.command()
@config_option
@app_dir_option
def check(config_path: Path | None, app_dir: Path) -> None:
    """Check everything `dstreams run` checks at start-up, without starting anything.

    \b
    One line per check, in the order the service makes them:
      brokers      the Kafka brokers answer (within 10 s)
      credentials  TLS and SASL accepted (secured clusters)
      job          the job's module imports and build(ctx) builds a graph with outputs
      acls         every ACL the job needs (secured clusters)
      storage      file outputs, checkpoints and the file journal: writable, and shared
                   wherever executors write
      replication  every topic meets kafka.min_replication_factor / min_insync_replicas
      sinks        Kafka outputs: transaction timeout within the brokers' limit, Avro
                   subjects in the schema registry (registered now with auto_register)
      journal      the journal reads and validates, and the job's graph is the one that
                   planned it: a restart recovers, or is refused, and why
    A check that needs a failed one is skipped. Creates no topic, table or journal.

    \b
    Exit codes, those `dstreams run` would refuse to start with:
      0  every check passed (warnings allowed): the service would start
      2  bad configuration (the file, a setting, the job's module), or a usage error
      4  refused: graph changed, journal damaged, access denied, topics under-replicated,
         brokers unreachable
      1  a crash of the check itself (a traceback)

    \b
    Examples:
      dstreams check --config job.yaml
      dstreams check --config /etc/dstreams/config.yaml      # a Helm pre-upgrade hook
    """
    use_app_dir(app_dir)
    code = report(run_checks(load_or_exit(config_path)))
    if code != EXIT_OK:
        raise click.exceptions.Exit(code)


def report(outcomes: list[Outcome]) -> int:
    """Prints a line per check and a verdict; the exit code of the first failure (the one
    `dstreams run` would stop at), or 0."""
    for outcome in outcomes:
        click.echo(f"{outcome.status:<5} {outcome.name}: {outcome.detail}")
    failed = [outcome for outcome in outcomes if outcome.exit_code != EXIT_OK]
    if not failed:
        click.echo("dstreams check: the service would start")
        return EXIT_OK
    names = ", ".join(outcome.name for outcome in failed)
    click.echo(f"dstreams check: {len(failed)} failed ({names})", err=True)
    return failed[0].exit_code


def run_checks(settings: Settings) -> list[Outcome]:
    """Every start-up step, with the brokers' answer first; the graph and journal closed after."""
    preflight = Preflight(settings, _NoMetrics())
    outcomes: dict[str, Outcome] = {}
    try:
        for step in (BROKERS, *STARTUP_CHECKS):
            outcomes[step.name] = _run_step(step, preflight, outcomes)
    finally:
        preflight.close()
    return list(outcomes.values())


def _run_step(step: StartupCheck, preflight: Preflight, done: dict[str, Outcome]) -> Outcome:
    blocked = [name for name in step.needs if done[name].status in ("FAIL", "skip")]
    if blocked:
        return Outcome(step.name, "skip", f"needs {', '.join(blocked)}")
    started = time.monotonic()
    warnings = len(preflight.warnings)
    try:
        found = step.run(preflight)
    except ConfigError as error:
        return Outcome(step.name, "FAIL", str(error), EXIT_CONFIG)
    except DStreamsError as error:
        return Outcome(step.name, "FAIL", f"{type(error).__name__}: {error}", EXIT_REFUSED)
    except Exception as error:  # noqa: BLE001 - the line says it; the other checks still run
        return Outcome(step.name, "FAIL", f"{type(error).__name__}: {error}", EXIT_CRASHED)
    status = "warn" if len(preflight.warnings) > warnings else "ok"
    return Outcome(step.name, status, f"{found} ({time.monotonic() - started:.1f}s)")
