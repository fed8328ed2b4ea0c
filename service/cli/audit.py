"""`dstreams audit`: check from a job's journal, and its sinks, that every input offset was
planned exactly once and every completed batch is committed in its sinks.

The journal's part is `service.journal.audit`, the sinks' part `service.cli.sink_audit` (files,
Kafka and dead letters, PostgreSQL; with `--config` only, which names the sinks). It reads only,
so it is safe while the driver runs.
"""

from __future__ import annotations

import click

from service.cli.journal import JournalSource, _read, _source_options
from service.cli.marker_audit import OutputCheck
from service.cli.sink_audit import check_outputs
from service.journal.audit import JournalAudit, audit_journal
from service.journal.base import JournalState


@click.command()
@_source_options
def audit(source: JournalSource) -> None:
    """Check every input offset was planned exactly once and every completed batch is
    committed in its sinks; exit 1 naming each violation.

    \b
    Per topic partition the batches' ranges must follow each other with no gap and no overlap,
    a re-planned batch must cover the same offsets, every completed batch must have been planned.
    Offsets a read skipped because retention deleted them are journaled, and counted as lost.
    With --config, every (output, batch, partition) the journal completed must be committed
    exactly once in its sink: files, its _SUCCESS and exactly the parts it names; Kafka (and
    dead letters), one committed marker in the marker topic and, read_committed, as many
    records in the output topic as the markers name; PostgreSQL, one marker row and as many
    table rows as the markers count. Dead letters are counted. The console is not checked.
    What cannot be checked (a journal of an older build, compacted markers) is said. A
    compacted journal is audited from its first kept batch. Reads only.

    \b
    Examples:
      dstreams audit --config job.yaml
      dstreams audit --file state/journal
    """
    state = JournalState.from_records(_read(source.journal))
    result = audit_journal(state)
    outputs = check_outputs(source.settings, state) if source.settings is not None else None
    click.echo("\n".join(describe(result, source.label) + describe_outputs(outputs)))
    failed = len(result.violations) + sum(len(c.violations) for c in outputs or [])
    if failed:
        msg = f"{source.label}: {failed} violations of exactly-once"
        raise click.ClickException(msg)


def describe(result: JournalAudit, label: str) -> list[str]:
    """The summary `audit` prints: batches, each partition's coverage, every violation."""
    lines = [f"journal:    {label}", f"batches:    {_batches(result)}"]
    pending = ", ".join(str(t) for t in result.pending) or "none"
    lines.append(f"pending:    {pending}")
    lines += [
        f"  {p.topic}-{p.partition}: offsets [{p.from_offset}, {p.until_offset}) in "
        f"{p.batches} batches, {p.lost} lost to retention"
        for p in result.partitions
    ]
    lines += [f"VIOLATION {v.kind}: {v.message}" for v in result.violations]
    verdict = "each planned exactly once" if result.ok else "FAILED"
    lines.append(f"input offsets: {verdict}")
    return lines


def _batches(result: JournalAudit) -> str:
    if not result.planned:
        return "none planned"
    first, last = result.planned[0], result.planned[-1]
    return f"{len(result.planned)} planned ({first} .. {last}), {len(result.completed)} completed"


def describe_outputs(checks: list[OutputCheck] | None) -> list[str]:
    """The sinks' part of the summary: what was checked of each output, every violation."""
    if checks is None:
        return ["outputs: not checked (give --config, which names the sinks)"]
    lines = ["outputs:" + ("" if checks else " none completed")]
    for check in checks:
        done = "checked" if check.checked else "not checked by this version"
        lines.append(f"  {check.output} ({check.kind}): {check.batches} completed batches, {done}")
        lines += [f"    {note}" for note in check.notes]
        lines += [f"VIOLATION {v.kind}: {v.message}" for v in check.violations]
    return lines
