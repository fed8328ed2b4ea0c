"""Warm state for a standby driver: the latest checkpoint's state, read before the take-over.

A waiting standby (`standby.enabled`, see `service.driver.election`) already has Spark and its
Python workers up; what is left of a take-over with large state is reading the checkpoint back
(docs/architecture.md, Recovery). `StatePreloader` follows the journal read-only while the
standby waits: whenever a newer checkpoint is journaled it verifies that checkpoint's pieces,
reads them into persisted RDDs and materializes them, then releases the older ones. It never
appends to the journal, never opens it for writing and never writes to the checkpoint store.

On election `take()` hands the latest `PreloadedCheckpoint` to recovery, which uses it only if
it is the very checkpoint recovery chooses (same batch time, same refs), and else loads from the
store as a cold driver does; either way the state is then recomputed forward through the
journaled batches exactly as in a cold recovery, so outputs and state are identical.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import Any

from service.graph.checkpoint_store import CheckpointError, CheckpointStore, PieceManifest
from service.graph.stateful import persist, release
from service.journal.base import Journal, JournalState
from service.journal.records import CheckpointRecord

log = logging.getLogger(__name__)
REFRESH_S = 1.0
"""How often a waiting standby reads the journal for a newer checkpoint."""


@dataclass(frozen=True)
class PreloadedCheckpoint:
    """One journaled checkpoint's pieces, read back and held in Spark's block store."""

    batch_time: int
    refs: dict[str, str]
    manifests: dict[str, PieceManifest]
    rdds: dict[str, Any]
    """Persisted and materialized RDDs, keyed by piece name (as `CheckpointRecord.refs`)."""

    def matches(self, record: CheckpointRecord) -> bool:
        """Whether this is the checkpoint `record` journals."""
        return record.batch_time == self.batch_time and dict(record.refs) == self.refs

    def release(self) -> None:
        for rdd in self.rdds.values():
            release(rdd)


class StatePreloader:
    """Follows the journal read-only and keeps the latest checkpoint's state pre-loaded."""

    def __init__(self, sc: Any, store: CheckpointStore, journal: Journal) -> None:
        self.sc = sc
        self.store = store
        self.journal = journal
        self.preloaded: PreloadedCheckpoint | None = None
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    def refresh(self) -> PreloadedCheckpoint | None:
        """Loads the latest journaled checkpoint if it is not the one held; returns what is held.

        A damaged or half-visible checkpoint is skipped (recovery decides what to do with it).
        """
        record = latest_checkpoint(JournalState.from_records(self.journal.read()))
        if record is None or not record.refs:
            return self.preloaded
        if self.preloaded is not None and self.preloaded.matches(record):
            return self.preloaded
        started = time.monotonic()
        try:
            loaded = self._load(record)
        except CheckpointError as error:
            log.warning("standby: cannot pre-load checkpoint %d: %s", record.batch_time, error)
            return self.preloaded
        previous, self.preloaded = self.preloaded, loaded
        if previous is not None:
            previous.release()
        log.info(
            "standby: pre-loaded the checkpoint of batch %d (%d pieces, %.2fs)",
            record.batch_time,
            len(loaded.rdds),
            time.monotonic() - started,
        )
        return loaded

    def _load(self, record: CheckpointRecord) -> PreloadedCheckpoint:
        refs = dict(record.refs)
        manifests = {ref: self.store.verify(ref) for ref in refs.values()}
        load = self.store.load
        rdds = {name: persist(load(self.sc, ref, manifests[ref])) for name, ref in refs.items()}
        try:
            for rdd in rdds.values():
                rdd.count()  # materializes it: reads and decodes every part file now
        except Exception as error:  # files deleted under us: the active driver moved on
            for rdd in rdds.values():
                release(rdd)
            msg = f"reading checkpoint {record.batch_time} failed ({error})"
            raise CheckpointError(msg) from error
        return PreloadedCheckpoint(record.batch_time, refs, manifests, rdds)

    def start(self) -> None:
        """Refreshes every `REFRESH_S` in a thread until `take()`."""
        self._thread = threading.Thread(target=self._follow, name="standby-state-preloader")
        self._thread.daemon = True
        self._thread.start()

    def take(self) -> PreloadedCheckpoint | None:
        """Stops following (waiting for a load in progress) and hands over what is held."""
        self._stopping.set()
        if self._thread is not None:
            self._thread.join()
        preloaded, self.preloaded = self.preloaded, None
        return preloaded

    def _follow(self) -> None:
        while not self._stopping.is_set():
            try:
                self.refresh()
            except Exception:  # pre-loading is an optimization; recovery loads cold anyway
                log.exception("standby: pre-loading state failed; will retry")
            self._stopping.wait(REFRESH_S)


def latest_checkpoint(state: JournalState) -> CheckpointRecord | None:
    """The checkpoint a recovery tries first (see `StateCheckpoints._usable_checkpoint`)."""
    retained = state.retained_checkpoints
    return retained[-1] if retained else None
