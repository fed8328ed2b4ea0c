"""The Spark side of live state queries: one job on chosen partitions, cancelled at a deadline,
and the partition a key lives in.

A query runs in an HTTP request's thread while the scheduler's thread runs batches; pyspark
lets several threads run jobs at once (each Python thread has its own JVM thread, so a job tag
set here stays with this query's jobs). A query job is tagged with a tag of its own, and a timer
cancels the tag's jobs at the deadline.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections.abc import Callable, Hashable, Iterable
from functools import partial
from typing import Any

from service.errors import DStreamsError
from service.graph.base import RDD
from service.graph.key_placement import driver_hashes_like_workers
from service.graph.state_lookup import partition_of, partitions_of

log = logging.getLogger(__name__)
_QUERIES = itertools.count()
QUERY_POOL = "dstreams-state-queries"
"""The scheduler pool of query jobs: under the driver's fair scheduling (`spark.scheduler.mode`)
a pool with no running task gets the next free core, so a query waits for one task of a batch
to end, not for all of them."""


class QueryUnavailable(DStreamsError):
    """A state query that cannot be answered now (HTTP 503): the driver is recovering, no batch
    has completed yet, or the query's Spark job timed out or failed."""


class Deadline:
    """When a query must have its answer, shared by the jobs it runs (a prefix scan runs one
    per partition)."""

    def __init__(self, timeout_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self.timeout_s = timeout_s
        self._at = clock() + timeout_s

    def remaining_s(self) -> float:
        """Seconds left; raises `QueryUnavailable` when none are."""
        left = self._at - self._clock()
        if left <= 0:
            msg = f"the query took longer than its {self.timeout_s:g} s; try again"
            raise QueryUnavailable(msg)
        return left


def run_on_partitions(
    sc: Any,
    rdd: RDD,
    function: Callable[[Iterable[Any]], Iterable[Any]],
    partitions: list[int],
    deadline: Deadline,
) -> list[Any]:
    """`sc.runJob(rdd, function, partitions)`, cancelled if it outlasts `deadline`."""
    tag = f"dstreams-state-query-{next(_QUERIES)}"
    cancelled = threading.Event()

    def cancel() -> None:
        cancelled.set()
        sc.cancelJobsWithTag(tag)

    timer = threading.Timer(deadline.remaining_s(), cancel)
    timer.daemon = True
    sc.addJobTag(tag)
    sc.setLocalProperty("spark.scheduler.pool", QUERY_POOL)  # this thread's jobs only
    timer.start()
    try:
        return list(sc.runJob(rdd, function, partitions))
    except Exception as error:
        if cancelled.is_set():
            msg = f"the query took longer than its {deadline.timeout_s:g} s; try again"
            raise QueryUnavailable(msg) from error
        log.warning("a state query's Spark job failed", exc_info=True)
        msg = f"the query's Spark job failed ({type(error).__name__}); see the driver's log"
        raise QueryUnavailable(msg) from error
    finally:
        timer.cancel()
        sc.removeJobTag(tag)
        sc.setLocalProperty("spark.scheduler.pool", None)


def key_partition(sc: Any, key: Hashable, partitions: int, deadline: Deadline) -> int:
    """The partition `key` lives in among `partitions`, as the workers' shuffles place it.

    The driver computes it itself when it started with the workers' hash seed (`dstreams run`
    makes sure it does: `service.cli.hash_seed`); otherwise one Python worker computes it, in a
    one-task job that reads no state, since the driver's own string hash would differ."""
    if driver_hashes_like_workers():
        return partition_of(partitions, key)
    probe = sc.parallelize([key], 1)
    found = run_on_partitions(sc, probe, partial(partitions_of, partitions), [0], deadline)
    return int(found[0])
