"""Where an output's time went inside Spark: the jobs it ran, read from Spark's status store.

Each output runs its jobs under a job group of its own (`job_group`), so afterwards the driver
can ask Spark which jobs those were, how many stages and tasks each had and how long each took
(docs/architecture.md, Observability). Reading them costs a few calls into the JVM per job.
"""

from __future__ import annotations

import itertools
import logging
import time
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SparkJob:
    """One Spark job an output ran for a batch."""

    job_id: int
    stages: int
    tasks: int
    seconds: float
    name: str = ""
    """Spark's call site of the job, e.g. `collect at outputs.py:71`."""

    def to_json(self) -> dict[str, Any]:
        return {
            "job_id": self.job_id,
            "name": self.name,
            "stages": self.stages,
            "tasks": self.tasks,
            "seconds": round(self.seconds, 4),
        }


# Numbers each group of this process: a batch run again (a replay, a retry after a failure) or
# another context with the same batch times must not find the earlier run's jobs in its group.
_RUNS = itertools.count()


def job_group(app: str, batch_time: int, output: str) -> str:
    """A new job group for `output`'s jobs of `batch_time`, unique in this process.

    >>> job_group("wc", 2000, "counts").startswith("dstreams-wc-2000-counts-")
    True
    """
    return f"dstreams-{app}-{batch_time}-{output}-{next(_RUNS)}"


def start_job_group(sc: Any, group: str) -> None:
    """Later jobs of this thread belong to `group` (Spark's job groups are thread-local)."""
    sc.setJobGroup(group, group, False)


def jobs_of_group(sc: Any, group: str) -> tuple[SparkJob, ...]:
    """The finished jobs of `group`, oldest first; empty when Spark cannot say."""
    try:
        store = sc._jsc.sc().statusStore()  # noqa: SLF001 - the JVM status store has job times
        ids = sorted(sc.statusTracker().getJobIdsForGroup(group))
        return tuple(_job(store, job_id) for job_id in ids)
    except Exception:  # a breakdown only: it must never fail a batch
        log.warning("could not read the Spark jobs of %s", group, exc_info=True)
        return ()


def _job(store: Any, job_id: int) -> SparkJob:
    data = store.job(job_id)
    submitted = data.submissionTime()
    completed = data.completionTime()
    # The status store is filled by Spark's listener bus a moment after the job ends: a job
    # without a completion time yet ends now, as far as the driver can tell.
    end_ms = completed.get().getTime() if completed.isDefined() else time.time() * 1000
    start_ms = submitted.get().getTime() if submitted.isDefined() else end_ms
    stages = int(data.stageIds().size())
    seconds = max(0.0, (end_ms - start_ms) / 1000)
    return SparkJob(int(job_id), stages, int(data.numTasks()), seconds, str(data.name()))
