"""`dstreams audit`: check from a job's journal that every input offset was planned exactly once.

The journal's part of the exactly-once audit (`service.journal.audit`); it reads only, so it is
safe while the driver runs. The sinks' side (each completed batch committed exactly once in its
sink) is not checked by this command.
"""

from __future__ import annotations

import click

from service.cli.journal import JournalSource, _read, _source_options
from service.journal.audit import JournalAudit, audit_journal
from service.journal.base import JournalState


@click.command()
@_source_options
def audit(source: JournalSource) -> None:
    """Check that the journal planned every input offset exactly once; exit 1 on a violation.

    \b
    Per topic partition the batches' ranges must follow each other with no gap and no overlap,
    a re-planned batch must cover the same offsets, every completed batch must have been planned.
    Offsets a read skipped because retention deleted them are journaled, and counted as lost.
    A compacted journal is audited from its first kept batch. Reads only.

    \b
    Examples:
      dstreams audit --config job.yaml
      dstreams audit --file state/journal
    """
    result = audit_journal(JournalState.from_records(_read(source.journal)))
    click.echo("\n".join(describe(result, source.label)))
    if not result.ok:
        msg = f"{source.label}: {len(result.violations)} violations of exactly-once input"
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
