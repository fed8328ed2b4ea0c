"""A driver's outage without the wait: the journal of a driver that last ran a batch long ago.

The bench and the tests of down-time batches (docs/architecture.md, Recovery) need a driver
that was down for an hour, or ten minutes, without waiting that long. `journal_outage` writes
what such a driver would have left: an epoch, the initial checkpoint record of a stateful graph,
and one planned and completed batch `down_ms` ago that read the given offset ranges. A driver
started on that journal then takes the real recovery and catch-up path.
"""

from __future__ import annotations

from collections.abc import Sequence

from connectors.offsets import OffsetRange
from service.config.settings import Settings
from service.driver.checkpoints import INITIAL_CHECKPOINT_TIME
from service.driver.engine import build_context
from service.driver.recovery import JournalLog
from service.driver.scheduler import now_ms
from service.driver.wiring import make_journal
from service.graph.plan import BatchPlan, SourcePlan
from service.graph.sources import KafkaInputDStream


def journal_outage(
    settings: Settings, down_ms: int, ranges: Sequence[OffsetRange], clock_ms: int | None = None
) -> int:
    """Journals one completed batch about `down_ms` before now that read `ranges` (the Kafka
    sources take the ranges of their topics); returns its batch time. The journal must be new."""
    ctx = build_context(settings)
    journal = make_journal(settings)
    try:
        epoch = journal.open()
        log = JournalLog(journal, epoch, ctx.graph_json())
        if ctx.stateful_streams():
            log.journal_checkpoint(INITIAL_CHECKPOINT_TIME, {})
        interval = settings.batch_interval_ms
        batch_time = ((clock_ms or now_ms()) - down_ms) // interval * interval
        plans = {
            source.name: SourcePlan(tuple(r for r in ranges if source.owns(r.topic)))
            for source in ctx.inputs
            if isinstance(source, KafkaInputDStream)
        }
        log.journal_planned(BatchPlan(batch_time, plans), ctx.fingerprint())
        nothing = {output.name: 0 for output in ctx.outputs}
        log.journal_completed(batch_time, nothing, (), nothing)
    finally:
        journal.close()
        ctx.close()
    return batch_time
