"""`dstreams ingest`: the HTTP ingest endpoint as a process of its own."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from service.cli.config import config_option


@click.command()
@config_option
def ingest(config_path: Path | None) -> None:
    """Serve POST /ingest/<source>: records in, 200 once the in-sync replicas have them.

    \b
    Each request's records are written in one Kafka transaction (acks=all) to the source's topic;
    an Idempotency-Key header makes a retried request write nothing twice (keys are remembered
    for ingest.key_retention_ms). The endpoint listens on ingest.host:ingest.port and serves
    /metrics, /healthz and /readyz there too. Exit codes: 0 graceful stop (SIGTERM/SIGINT),
    2 bad configuration, 3 fenced out by a newer endpoint of the same app, 4 refused to start
    (topics missing or under-replicated).

    \b
    Example:
      dstreams ingest --config config/wordcount.yaml
      curl -H 'Content-Type: application/x-ndjson' -H 'Idempotency-Key: batch-42' \\
           --data-binary @records.jsonl http://localhost:8081/ingest/lines
    """
    from service.cli.config import load_or_exit
    from service.driver.engine import EXIT_REFUSED
    from service.errors import ConfigError, DStreamsError
    from service.ingest.app import run_ingest

    settings = load_or_exit(config_path)
    try:
        code = run_ingest(settings)
    except ConfigError as error:
        click.echo(f"configuration error: {error}", err=True)
        code = 2
    except DStreamsError as error:
        click.echo(f"dstreams ingest refused to start: {type(error).__name__}: {error}", err=True)
        code = EXIT_REFUSED
    sys.exit(code)
