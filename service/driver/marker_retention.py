"""Sink markers kept as long as the journal can still ask about their batches, and no longer.

A sink recognises a batch it has committed by a marker (the PostgreSQL sink: a row per batch and
partition). The journal's compaction (`service.journal.base.compact`) drops every batch before
its horizon, and no recovery replays one of those again, so their markers only grow the table.
`ForgettingJournal` watches what the driver journals and, every `PRUNE_EVERY` appends, tells each
output to forget the batches more than `GRACE_MS` before the horizon (docs/architecture.md,
"Sinks"). The grace keeps the markers a zombie driver, paused past its lease and woken with an
old batch in hand, would still find, so its late write is skipped instead of written twice.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import KW_ONLY, dataclass, field
from typing import Protocol

from service.errors import DStreamsError
from service.journal.base import Journal, forgotten_before
from service.journal.records import JournalRecord

log = logging.getLogger(__name__)

# Two records per batch (planned, completed): about every 50 batches, one read of the journal
# (from its latest snapshot) and one DELETE per output.
PRUNE_EVERY = 100
# A day of batches past the horizon: far beyond any lease or session timeout a paused driver
# could outlast and still hold a batch to write.
GRACE_MS = 24 * 3_600_000


class ForgettingOutput(Protocol):
    def forget_before(self, app: str, batch_time: int) -> None: ...


@dataclass
class ForgettingJournal:
    """`journal`, whose appends also move the outputs' marker horizon (see the module)."""

    journal: Journal
    app_id: str
    outputs: Sequence[ForgettingOutput]
    _: KW_ONLY
    prune_every: int = PRUNE_EVERY
    grace_ms: int = GRACE_MS
    forgotten: int | None = field(default=None, init=False)
    """The horizon last told to the outputs: markers of batches before it are deleted."""
    _since_prune: int = field(default=0, init=False)

    def open(self) -> int:
        return self.journal.open()

    def read(self) -> list[JournalRecord]:
        return self.journal.read()

    def close(self) -> None:
        self.journal.close()

    def append(self, record: JournalRecord) -> None:
        self.journal.append(record)
        self._since_prune += 1
        if self._since_prune >= self.prune_every:
            self._since_prune = 0
            try:
                self.prune()
            except DStreamsError as error:
                # Housekeeping: a sink or journal that cannot answer now is asked again later.
                log.warning("sink markers not pruned this time: %s", error)

    def prune(self) -> None:
        """Forget the batches more than the grace before the journal's horizon."""
        horizon = forgotten_before(self.journal.read())
        if horizon is None:
            return
        bound = horizon - self.grace_ms
        if self.forgotten is not None and bound <= self.forgotten:
            return
        for output in self.outputs:
            output.forget_before(self.app_id, bound)
        self.forgotten = bound
        log.debug("sink markers before batch %d forgotten (journal horizon %d)", bound, horizon)
