"""`update_state_on_disk`: a keyed state larger than memory, checkpointed by what changed
(docs/architecture.md, "State on disk").

`update_state_by_key` keeps its state as an RDD: every batch passes every key through a merge,
and every checkpoint writes every key. That is the D-Streams model, and right for states that
fit in memory. Here the state lives in one SQLite store per partition on the executors' disks
(`service.graph.disk_store`), a batch reads and writes only the keys it touches
(`service.graph.disk_task`), and the durable record is each batch's changes plus a snapshot of
each partition now and then, published by the tasks themselves
(`service.graph.disk_changelog`). A checkpoint of the state is then only the batch its stores
are at: its cost does not grow with the state.

The batch's RDD is its changes, persisted; it depends on the previous batch's changes through a
narrow, row-less dependency (`_nothing`), so Spark runs a partition's batches in order even when
no output reads them between checkpoints. Exactly-once rests on the same ground as the rest of
the engine: a batch's input is journaled before it runs, so a batch that runs again finds its
own durable changes and returns them, and a lost local store is rebuilt from the durable files.
"""

from __future__ import annotations

import logging
import sqlite3
from functools import partial
from pathlib import Path
from typing import Any

from service.errors import ConfigError
from service.graph import state_functions as fn
from service.graph import stateful
from service.graph.base import RDD, BatchStream, GraphContext
from service.graph.checkpoint_files import CheckpointFiles
from service.graph.disk_changelog import Lineage
from service.graph.disk_store import LocalStore
from service.graph.disk_task import DiskStateTask, dump_partition, load_partition, run_partition
from service.graph.plan import BatchPlan

log = logging.getLogger(__name__)

KIND = "update_state_on_disk"
DEFAULT_SNAPSHOT_EVERY = 20
CHECKPOINTS_KEPT = 3
"""Checkpoints whose batch a state on disk can still be rebuilt at: the journal's retained ones
and the one being written."""


class DiskKeyedState(stateful.StatefulComputation):
    """The changes of a keyed state on disk, batch by batch."""

    def __init__(
        self,
        ctx: GraphContext,
        parent: BatchStream,
        update_fn: fn.UpdateFunction,
        partitions: int,
        ttl_ms: int | None,
        snapshot_every: int,
    ) -> None:
        super().__init__(ctx, parent, KIND)
        if ttl_ms is not None and ttl_ms <= 0:
            msg = f"{KIND}: ttl_ms must be positive or None, got {ttl_ms}"
            raise ValueError(msg)
        if snapshot_every < 1:
            msg = f"{KIND}: snapshot_every_batches must be at least 1, got {snapshot_every}"
            raise ValueError(msg)
        self.partitions = partitions
        self.params.update(partitions=partitions, ttl_ms=ttl_ms)
        self._update = update_fn
        self._ttl_ms = ttl_ms
        self._snapshot_every = snapshot_every
        self._storage: tuple[CheckpointFiles, Path, str] | None = None
        self._origin: int | None = None
        self.version: int | None = None
        """The batch the state is at once the batches computed so far have run."""
        self._chain: list[tuple[int, RDD]] = []
        self._checkpointed: list[tuple[int, str]] = []
        """The batch and lineage folder of the last checkpoints (what pruning must keep)."""
        self.queried = False
        """Made queryable: the stores keep what their last batches replaced."""

    def use_storage(self, files: CheckpointFiles, local_dir: Path, name: str) -> None:
        """Where the durable changes go (the checkpoint store) and the local stores live."""
        self._storage = (files, local_dir, name)

    # --- batches -------------------------------------------------------------------------------

    def compute(self, plan: BatchPlan) -> RDD:
        t = plan.batch_time
        if self.version is not None and self.version >= t:
            msg = f"{KIND}: batch {t} asked for after batch {self.version}"
            raise fn.StateError(msg)
        no_input = self.parent.is_empty(plan)
        if self.decide_empty(t, no_input and self._ttl_ms is None):
            return self.ctx.sc.emptyRDD()  # nothing changes: the state stays at its version
        sc = self.ctx.sc
        if no_input:
            news = sc.parallelize([], self.partitions).partitionBy(self.partitions)
        else:
            tagged = self.parent.rdd_at(plan).mapPartitionsWithIndex(
                fn.tag_new_values, preservesPartitioning=True
            )
            news = tagged.partitionBy(self.partitions)
        inputs = [news]
        if self._chain:
            before = self._chain[-1][1].mapPartitions(_nothing, preservesPartitioning=True)
            inputs = [before, news]
        task = partial(run_partition, self.task(t), t, self.version)
        union = stateful.union_partitioned(sc, inputs)
        changes = stateful.persist(union.mapPartitionsWithIndex(task, preservesPartitioning=True))
        self._chain = [*self._chain, (t, changes)]
        self.version = t
        return changes

    def task(self, batch_time: int | None = None) -> DiskStateTask:
        """What a task of this state needs; the lineage starts at the first batch computed."""
        if self._storage is None:
            msg = (
                f"{KIND} keeps its state beside the checkpoints, but this graph runs without a "
                "checkpoint store; run it with `dstreams run` (or give the context one with "
                "`place_state`)"
            )
            raise ConfigError(msg)
        if self._origin is None:
            if batch_time is None:
                msg = f"{KIND}: no batch has run, so the state has no files yet"
                raise fn.StateError(msg)
            self._origin = batch_time
        files, local_dir, name = self._storage
        lineage = Lineage(files, name, self._origin, self.partitions)
        root = str(local_dir / name)
        return DiskStateTask(
            lineage, root, self._update, self._ttl_ms, self._snapshot_every, self.queried
        )

    def forget(self, batch_time: int) -> None:
        self._chain = stateful.release_superseded(self._chain)

    # --- checkpoints ---------------------------------------------------------------------------

    def checkpoint_pieces(self, batch_time: int) -> list[stateful.Piece]:
        if self._chain:
            # Every batch so far has run (and published its changes) once the latest has.
            self._chain[-1][1].foreachPartition(_drain)
        meta = {"origin": self._origin, "version": self.version, "partitions": self.partitions}
        if self._origin is not None:
            self._remember_checkpoint()
            self._prune()
        return [stateful.Piece("disk", self.ctx.sc.parallelize([meta], 1), "rows")]

    def restore(self, batch_time: int, pieces: dict[str, RDD]) -> None:
        """Carries on from a checkpoint's lineage and batch. Recovery may want another count
        than the checkpoint's (the journaled batches after it were planned in another, see
        `service.driver.rescale`): the state then moves into that count at once."""
        (meta,) = pieces["disk"].collect()
        for _, rdd in self._chain:
            stateful.release(rdd)
        self._chain = []
        wanted = self.partitions
        self._origin, self.version = meta["origin"], meta["version"]
        self.partitions = meta["partitions"]
        if self._origin is not None and self._storage is not None:
            self._remember_checkpoint()
        if wanted != self.partitions:
            log.info(
                "%s: the checkpoint of batch %s holds %d partitions, the journaled batches "
                "after it want %d: moving the state",
                KIND,
                self.version,
                self.partitions,
                wanted,
            )
            self.rescale(wanted)

    def summarise(self, keys: int, size: int) -> None:
        """The keys and bytes are the local stores' (the checkpoint holds only metadata); 0 on
        a cluster, where the driver does not see them."""
        self.set_summary(keys=self.local_keys(), bytes=self.local_bytes())

    def _remember_checkpoint(self) -> None:
        entry = (self.version or 0, self.task().lineage.base)
        if entry not in self._checkpointed:
            self._checkpointed = [*self._checkpointed, entry][-CHECKPOINTS_KEPT:]

    def _prune(self) -> None:
        """Deletes the durable files no retained checkpoint needs: per partition, what lies
        before its newest snapshot at or before the oldest checkpoint kept, and the lineages
        (an earlier start, another partition count) no kept checkpoint names."""
        if len(self._checkpointed) < CHECKPOINTS_KEPT:
            return
        lineage = self.task().lineage
        named = {base for _, base in self._checkpointed}
        lineage.prune(min(t for t, base in self._checkpointed if base == lineage.base))
        for other in list(lineage.other_lineages()):
            if other not in named:
                lineage.files.delete_tree(other)

    def rescale(self, partitions: int) -> None:
        """From the next batch on, the state lives in `partitions` stores: a new lineage that
        starts at the current batch from a snapshot per new partition, made by one Spark job
        that reads every old store as of that batch and moves its keys (docs/architecture.md,
        "Recovery"). Recovery calls this once, after the journaled batches ran in the old
        count; a crash before the next checkpoint makes the next recovery do it again, into the
        same files."""
        if partitions == self.partitions:
            return
        if self.version is None:  # nothing stored yet: the first batch starts the lineage
            self.partitions, self._origin = partitions, None
            return
        if self._chain:
            self._chain[-1][1].foreachPartition(_drain)
        old = self.task()
        self.partitions, self._origin = partitions, self.version
        new = self.task()
        sc = self.ctx.sc
        dumped = sc.parallelize(range(old.lineage.partitions), old.lineage.partitions)
        rows = dumped.mapPartitionsWithIndex(partial(dump_partition, old, self.version))
        moved = rows.partitionBy(partitions)
        moved.mapPartitionsWithIndex(partial(load_partition, new, self.version)).count()
        for _, rdd in self._chain:
            stateful.release(rdd)
        self._chain = []

    # --- what the driver can read --------------------------------------------------------------

    def local_store(self, partition: int) -> LocalStore | None:
        """Partition `partition`'s store opened for reading, when this machine holds it (local
        mode, or a local folder shared with the executors)."""
        if self._origin is None or self._storage is None:
            return None
        path = self.task().store_path(partition)
        return LocalStore(path, read_only=True) if path.exists() else None

    def local_keys(self) -> int:
        """Keys in the stores this machine holds (all of them in local mode)."""
        return sum(map(self._local_keys_of, range(self.partitions)))

    def _local_keys_of(self, partition: int) -> int:
        """A store that cannot be read now counts none: the count is a summary, and a store is
        a cache its tasks rebuild; the driver must not die for it. Seen once in a chaos run:
        a restarted driver's read-only open of a store a killed task had been writing failed
        with "attempt to write a readonly database" and ended its recovery."""
        try:
            store = self.local_store(partition)
            if store is None:
                return 0
            with store:
                return store.keys
        except sqlite3.Error as error:
            log.warning("state store %d not readable for its key count: %s", partition, error)
            return 0

    def local_bytes(self) -> int:
        """Bytes of the stores this machine holds, their write-ahead logs included."""
        if self._origin is None or self._storage is None:
            return 0
        task = self.task()
        files = [task.store_path(p) for p in range(self.partitions)]
        files += [f.with_name(f"{f.name}-wal") for f in files]
        return sum(f.stat().st_size for f in files if f.exists())


def _nothing(rows: Any) -> Any:
    """Reads the previous batch's changes (running their task if needed) and passes none on."""
    for _ in rows:
        pass
    return iter(())


def _drain(rows: Any) -> None:
    for _ in rows:
        pass
