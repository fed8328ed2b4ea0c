"""`dstreams journal show|verify`: read a job's journal (file or Kafka) without taking an epoch.

Neither command writes: they never fence the running driver and never truncate a torn tail. The
journal is the one the job's `--config` names, or one given by path options, which win.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import wraps
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from service.cli.config import config_option
from service.errors import DStreamsError
from service.journal.base import Journal, JournalState
from service.journal.records import JournalRecord, PlannedRecord

if TYPE_CHECKING:
    from service.config.settings import Settings


@click.group()
def journal() -> None:
    """Inspect a job's master-state journal.

    \b
    Examples:
      dstreams journal show --config config/wordcount.yaml
      dstreams journal show --file /data/wordcount.journal
      dstreams journal show --kafka 127.0.0.1:9092 --topic dstreams-journal --app wordcount
      dstreams journal verify --file /data/wordcount.journal
    """


@dataclass(frozen=True)
class JournalSource:
    """The journal a command reads, how its messages name it, and the job's settings when the
    journal came from `--config` (None when path options named it)."""

    journal: Journal
    label: str
    settings: Settings | None = None


def _source_options(command: Callable[..., None]) -> Callable[..., None]:
    """Adds `--config JOB.yaml` and `--file PATH | --kafka BOOTSTRAP --topic T --app APP`,
    passed on as one `JournalSource`."""

    @config_option
    @click.option(
        "--file",
        "file_",
        type=click.Path(dir_okay=False, path_type=Path),
        help="journal file (the job's journal.path)",
    )
    @click.option("--kafka", "bootstrap", metavar="BOOTSTRAP", help="bootstrap servers")
    @click.option("--topic", help="journal topic (with --kafka)")
    @click.option("--app", help="app id (with --kafka)")
    @wraps(command)
    def wrapper(
        config_path: Path | None,
        file_: Path | None,
        bootstrap: str | None,
        topic: str | None,
        app: str | None,
        **kwargs: Any,
    ) -> None:
        if file_ is not None or bootstrap or topic or app:
            source = _journal_from_options(file_, bootstrap, topic, app)
        elif config_path is not None:
            source = _journal_from_config(config_path)
        else:
            msg = (
                "give --config JOB.yaml (the job's journal settings), or --file PATH, or "
                "--kafka BOOTSTRAP with --topic T and --app APP"
            )
            raise click.UsageError(msg)
        command(source, **kwargs)

    return wrapper


@journal.command()
@_source_options
@click.option("--json", "as_json", is_flag=True, help="print the summary as JSON")
def show(source: JournalSource, as_json: bool) -> None:
    """Epochs, last planned and completed batches, checkpoint, pending batches, positions.

    Reads only; safe while the driver runs.

    \b
    Examples:
      dstreams journal show --config job.yaml
      dstreams journal show --file state/journal
      dstreams journal show --file state/journal --json
      dstreams journal show --kafka 127.0.0.1:9092 --topic dstreams-journal --app wordcount
    """
    state = JournalState.from_records(_read(source.journal))
    if as_json:
        click.echo(json.dumps({"journal": source.label, **state.summary()}, indent=2))
    else:
        click.echo("\n".join(describe(state, source.label)))


@journal.command()
@_source_options
def verify(source: JournalSource) -> None:
    """Check integrity (framing, checksums, versions) and contiguity; exit 1 on any damage.

    Reads only; safe while the driver runs. A damaged record is named by its byte offset.

    \b
    Examples:
      dstreams journal verify --config job.yaml
      dstreams journal verify --file state/journal
      dstreams journal verify --kafka 127.0.0.1:9092 --topic dstreams-journal --app wordcount
    """
    label = source.label
    state = JournalState.from_records(_read(source.journal))
    try:
        state.validate()
    except DStreamsError as exc:
        msg = f"{label}: {exc}"
        raise click.ClickException(msg) from exc
    torn = _torn_tail(source.journal)
    if torn:
        click.echo(
            f"{label}: note: the last {torn[1]} bytes (from byte {torn[0]}) are a torn append "
            "that never completed; the next driver to open the journal drops them"
        )
    click.echo(
        f"{label}: ok — {len(state.records)} records, epoch {state.epoch}, "
        f"{len(state.planned)} planned batches, {len(state.pending())} pending"
    )


def describe(state: JournalState, label: str) -> list[str]:
    """The human-readable summary `show` prints."""
    last_p, last_c, ckpt = state.last_planned, state.last_completed, state.checkpoint
    lines = [f"journal:        {label}", f"records:        {len(state.records)}"]
    lines.append(f"epoch:          {state.epoch}")
    lines += [
        f"  epoch {e.epoch:<6} started {_when(e.started_at_ms)} by {e.owner}" for e in state.epochs
    ]
    lines.append(f"last planned:   {_planned(last_p) if last_p else '-'}")
    if last_c:
        outputs = ", ".join(f"{k}={v}" for k, v in sorted(last_c.outputs.items())) or "-"
        lines.append(
            f"last completed: batch {last_c.batch_time} ({_when(last_c.batch_time)}) "
            f"epoch {last_c.epoch}, rows {outputs}"
        )
    else:
        lines.append("last completed: -")
    if ckpt:
        refs = ", ".join(f"{k}={v}" for k, v in sorted(ckpt.refs.items())) or "-"
        lines.append(f"checkpoint:     batch {ckpt.batch_time} epoch {ckpt.epoch}, refs {refs}")
    else:
        lines.append("checkpoint:     -")
    pending = [str(p.batch_time) for p in state.pending()]
    lines.append(f"pending:        {', '.join(pending) if pending else 'none'}")
    positions = sorted(state.last_positions().items())
    lines.append("next offsets:   " + (", ".join(f"{t}-{p}={o}" for (t, p), o in positions) or "-"))
    return lines


def _journal_from_options(
    file_: Path | None, bootstrap: str | None, topic: str | None, app: str | None
) -> JournalSource:
    if file_ is not None and bootstrap is None:
        if not file_.exists():
            msg = f"no journal file at {file_}; expected the path the job's settings name"
            raise click.BadParameter(msg, param_hint="--file")
        from service.journal.file import FileJournal

        return JournalSource(FileJournal(file_), f"file {file_}")
    if file_ is None and bootstrap and topic and app:
        from service.journal.kafka import KafkaJournal

        conf = {"bootstrap.servers": bootstrap}
        # Replication settings only matter when a writer creates the topic; readers never do.
        return JournalSource(KafkaJournal(conf, topic, app, 1, 1), _kafka_label(topic, bootstrap))
    msg = "give either --file PATH, or --kafka BOOTSTRAP with --topic T and --app APP"
    raise click.UsageError(msg)


def _journal_from_config(config_path: Path) -> JournalSource:
    """The journal the job's settings name, built as the service builds it (with the Kafka
    client settings, security included), so nothing is retyped."""
    from service.cli.config import load_or_exit
    from service.config.journal import FileJournalSettings

    settings = load_or_exit(config_path)
    configured = settings.journal
    if isinstance(configured, FileJournalSettings):
        path = Path(configured.path)
        if not path.exists():
            msg = (
                f"no journal file at {path} (journal.path in {config_path}); run from the "
                "directory the service runs in, or give --file PATH"
            )
            raise click.BadParameter(msg, param_hint="--config")
        label = f"file {path}"
    else:
        label = _kafka_label(configured.topic, settings.kafka.bootstrap_servers)
    return JournalSource(configured.build(settings.app_id, settings.kafka), label, settings)


def _kafka_label(topic: str, bootstrap: str) -> str:
    return f"kafka topic {topic} at {bootstrap}"


def _read(source: Journal) -> list[JournalRecord]:
    try:
        return list(source.read())
    except DStreamsError as exc:
        raise click.ClickException(str(exc)) from exc


def _torn_tail(source: Journal) -> tuple[int, int] | None:
    """(offset, length) of a torn last record in a file journal; Kafka has no such thing."""
    from service.journal.file import FileJournal, scan_frames

    if not isinstance(source, FileJournal):
        return None
    scan = scan_frames(source.path.read_bytes(), source.path)
    return (scan.good_end, scan.torn_bytes) if scan.torn_bytes else None


def _planned(record: PlannedRecord) -> str:
    ranges = " ".join(
        f"{r.topic}-{r.partition}[{r.from_offset},{r.until_offset})" for r in sorted(record.ranges)
    )
    return (
        f"batch {record.batch_time} ({_when(record.batch_time)}) epoch {record.epoch}, "
        f"fingerprint {record.graph_fingerprint}, {len(record.ranges)} ranges: {ranges or '-'}"
    )


def _when(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=UTC).isoformat(timespec="milliseconds")
