"""`dstreams dev ...`: local services for development, e.g. `dstreams dev kafka --brokers 3` or
`dstreams dev spark --workers 2`."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from types import FrameType

import click

from service.cli.class_archive import class_archive
from service.dev.kafka_cluster import KAFKA_VERSION, KafkaClusterError, LocalKafkaCluster
from service.dev.kafka_security import SERVICE_USER, KafkaSecurityError, write_client_files
from service.dev.processes import StartedOnEnter
from service.dev.spark_cluster import LocalSparkCluster, SparkClusterError


@click.group()
def dev() -> None:
    """Local services for development and demos.

    \b
    Examples:
      dstreams dev kafka --brokers 3
      dstreams dev spark --workers 2
      dstreams dev class-archive    # the same as `dstreams class-archive`
    """


dev.add_command(class_archive, "class-archive")


@dev.command()
@click.option(
    "--brokers",
    type=click.IntRange(1, 5),
    default=1,
    show_default=True,
    help="Number of brokers (3 gives replication factor 3 and min.insync.replicas=2).",
)
@click.option(
    "--secure",
    is_flag=True,
    help="Add mutual-TLS and SASL_SSL (SCRAM-SHA-512) listeners and the ACL authorizer.",
)
def kafka(brokers: int, secure: bool) -> None:
    """Run a local Apache Kafka (KRaft) cluster until Ctrl-C or SIGTERM.

    \b
    Example:
      dstreams dev kafka --brokers 3
      export KAFKA_BOOTSTRAP_SERVERS=...   # as printed; tests and the demo then use it
      export DSTREAMS_KAFKA__BOOTSTRAP_SERVERS=...   # as printed; for dstreams run

    \b
    With --secure, prints where the client settings for user `dstreams` are (a `kafka:`
    section for SASL_SSL and one for mutual TLS) and how to pass the generated password;
    the user has no ACLs until you add them (README, Running against a secured cluster).
    """
    cluster = LocalKafkaCluster(brokers=brokers, secure=secure)

    def announce() -> None:
        _announce(cluster)
        if secure:
            _print_secured_clients(cluster)

    _run_until_stopped(
        cluster,
        starting=f"Starting Apache Kafka {KAFKA_VERSION} with {brokers} broker(s)...",
        announce=announce,
        errors=(KafkaClusterError, KafkaSecurityError),
        stopping="Stopping the brokers...",
    )


@dev.command()
@click.option("--workers", type=click.IntRange(1, 8), default=2, show_default=True, help="JVMs.")
@click.option("--cores", type=click.IntRange(1, 64), default=1, show_default=True, help="Each.")
@click.option("--memory", default="1g", show_default=True, help="Per worker, for its executors.")
def spark(workers: int, cores: int, memory: str) -> None:
    """Run a Spark standalone master and workers (pyspark's own jars) until Ctrl-C or SIGTERM.

    \b
    Prints the master URL; point a job at it with spark.master, e.g.
      dstreams dev spark --workers 2
      export DSTREAMS_SPARK__MASTER=spark://127.0.0.1:...   # as printed
    """
    cluster = LocalSparkCluster(workers=workers, cores=cores, memory=memory)

    def announce() -> None:
        click.echo(cluster.master_url)
        hosts = ", ".join(worker.host for worker in cluster.workers)
        click.echo(
            f"Workers on {hosts}, {cores} core(s) and {memory} each; files and logs in "
            f"{cluster.workdir}\nexport DSTREAMS_SPARK__MASTER={cluster.master_url}\n"
            "Press Ctrl-C to stop.",
            err=True,
        )

    _run_until_stopped(
        cluster,
        starting=f"Starting a Spark master and {workers} worker(s)...",
        announce=announce,
        errors=(SparkClusterError,),
        stopping="Stopping the workers and the master...",
    )


def _run_until_stopped(
    cluster: StartedOnEnter,
    *,
    starting: str,
    announce: Callable[[], None],
    errors: tuple[type[Exception], ...],
    stopping: str,
) -> None:
    """Start `cluster`, `announce` it, and keep it until Ctrl-C or SIGTERM; stop it either way.
    An error of `errors` becomes the command's own error message."""
    # SIGTERM (docker stop, kill) takes the same orderly path as Ctrl-C. SIGINT is set too: a
    # shell starts background jobs with it ignored, and `kill -INT` should still stop the cluster.
    previous = {sig: signal.signal(sig, _interrupt) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        click.echo(starting, err=True)
        cluster.start()
        announce()
        while True:
            time.sleep(1)
    except errors as error:
        raise click.ClickException(str(error)) from error
    except KeyboardInterrupt:
        click.echo(stopping, err=True)
    finally:
        cluster.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _announce(cluster: LocalKafkaCluster) -> None:
    """The address on stdout (for scripts); where the files are and what to export on stderr."""
    click.echo(cluster.bootstrap_servers)
    click.echo(
        f"Broker files and logs: {cluster.workdir}\n"
        f"export KAFKA_BOOTSTRAP_SERVERS={cluster.bootstrap_servers}\n"
        f"export DSTREAMS_KAFKA__BOOTSTRAP_SERVERS={cluster.bootstrap_servers}"
        "   # for dstreams run\n"
        "Press Ctrl-C to stop.",
        err=True,
    )


def _print_secured_clients(cluster: LocalKafkaCluster) -> None:
    """Where the client settings are; secrets stay in their files and are never printed."""
    files = write_client_files(
        cluster.security, cluster.sasl_ssl_bootstrap_servers, cluster.ssl_bootstrap_servers
    )
    click.echo(
        f"Secured listeners: SASL_SSL (SCRAM-SHA-512) at {cluster.sasl_ssl_bootstrap_servers}, "
        f"mutual TLS at {cluster.ssl_bootstrap_servers}; CA {cluster.security.ca_certificate}.\n"
        f"User {SERVICE_USER!r} over SASL_SSL: the kafka section in {files['sasl_ssl']}, and\n"
        f'  export DSTREAMS_KAFKA__SASL_PASSWORD="$(cat {files["sasl_password"]})"\n'
        f"User {SERVICE_USER!r} over mutual TLS: the kafka section in {files['mutual_tls']}, and\n"
        f'  export DSTREAMS_KAFKA__SSL_KEY_PASSWORD="$(cat {files["key_password"]})"\n'
        f"The PLAINTEXT port {cluster.bootstrap_servers} is a super-user port for the brokers "
        "and for adding users and ACLs (kafka-acls --bootstrap-server ...).",
    )


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt
