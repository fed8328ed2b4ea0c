"""`dstreams dev ...`: local services for development, e.g. `dstreams dev kafka --brokers 3`."""

from __future__ import annotations

import signal
import time
from types import FrameType

import click

from service.dev.kafka_cluster import KAFKA_VERSION, KafkaClusterError, LocalKafkaCluster


@click.group()
def dev() -> None:
    """Local services for development and demos.

    \b
    Example:
      dstreams dev kafka --brokers 3
    """


@dev.command()
@click.option(
    "--brokers",
    type=click.IntRange(1, 5),
    default=1,
    show_default=True,
    help="Number of brokers (3 gives replication factor 3 and min.insync.replicas=2).",
)
def kafka(brokers: int) -> None:
    """Run a local Apache Kafka (KRaft) cluster until Ctrl-C or SIGTERM.

    \b
    Example:
      dstreams dev kafka --brokers 3
      export KAFKA_BOOTSTRAP_SERVERS=...   # as printed; tests and the demo then use it
    """
    # SIGTERM (docker stop, kill) takes the same orderly path as Ctrl-C. SIGINT is set too: a
    # shell starts background jobs with it ignored, and `kill -INT` should still stop the brokers.
    previous = {sig: signal.signal(sig, _interrupt) for sig in (signal.SIGINT, signal.SIGTERM)}
    cluster = LocalKafkaCluster(brokers=brokers)
    try:
        click.echo(f"Starting Apache Kafka {KAFKA_VERSION} with {brokers} broker(s)...", err=True)
        cluster.start()
        click.echo(cluster.bootstrap_servers)
        click.echo(
            f"Broker files and logs: {cluster.workdir}\n"
            f"export KAFKA_BOOTSTRAP_SERVERS={cluster.bootstrap_servers}\n"
            "Press Ctrl-C to stop.",
            err=True,
        )
        while True:
            time.sleep(1)
    except KafkaClusterError as error:
        raise click.ClickException(str(error)) from error
    except KeyboardInterrupt:
        click.echo("Stopping the brokers...", err=True)
    finally:
        cluster.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt
