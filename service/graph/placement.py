"""Stable placement of output tasks on a cluster: partition p runs on the same executor each batch.

A Kafka sink's task p writes with `transactional.id = dstreams.<app>.<output>.<p>`, through a
producer that lives in one executor's Python worker. Spark runs a shuffle's reduce tasks wherever
a core is free, so from batch to batch task p lands on either executor, and each move costs an
`init_transactions()` there (fencing the producer on the other executor, which learns it only
when its next transaction fails): 0.1-1 s, against ~10 ms for a transaction.

Spark takes a task's preferred locations from its RDD, and else from its narrow parents. So the
write job's RDD (one report per partition) is zipped, in the JVM, behind an *anchor*: a tiny RDD
whose partition p holds nothing but a preference for executor number `p mod E` (live executors
sorted by id). The write runs inside the zip's task, which Spark sends to that executor when it
has a free core, and after `spark.locality.wait.process` elsewhere. When the executors change
(one dies, one joins) the mapping changes once and is stable again. Fencing is untouched: any
attempt of task p, wherever it runs, uses the same transactional.id, so a retry, a speculative
copy or a zombie is still fenced by the broker.
"""

from __future__ import annotations

import logging
from typing import Any

log = logging.getLogger(__name__)
RDD = Any  # pyspark.RDD (see service.graph.base, which imports this module)

Executor = tuple[str, str]
"""(executor id, host) of a live executor."""


class OutputPlacement:
    """Pins output tasks to executors when `active` (a cluster with stable placement on)."""

    def __init__(self) -> None:
        self.active = False
        self._anchors: dict[tuple[int, tuple[Executor, ...]], Any] = {}

    def pinned(self, rdd: RDD) -> RDD:
        """`rdd` whose partition p prefers a fixed executor; `rdd` itself when inactive or when
        fewer than two executors are alive (nowhere else to go)."""
        if not self.active:
            return rdd
        executors = live_executors(rdd.context)
        if len(executors) < 2:
            return rdd
        anchor = self._anchor(rdd.context, rdd.getNumPartitions(), executors)
        return behind(anchor, rdd)

    def _anchor(self, sc: Any, partitions: int, executors: tuple[Executor, ...]) -> Any:
        key = (partitions, executors)
        anchor = self._anchors.get(key)
        if anchor is None:
            self._anchors.clear()  # the old executors' anchors are of no more use
            anchor = self._anchors[key] = anchor_rdd(sc, preferred_locations(partitions, executors))
        return anchor


def preferred_locations(partitions: int, executors: tuple[Executor, ...]) -> list[str]:
    """Spark's location tag of executor `p mod E` for each partition p.

    >>> preferred_locations(3, (("0", "10.0.0.1"), ("1", "10.0.0.2")))
    ['executor_10.0.0.1_0', 'executor_10.0.0.2_1', 'executor_10.0.0.1_0']
    """
    return ["executor_{1}_{0}".format(*executors[p % len(executors)]) for p in range(partitions)]


def live_executors(sc: Any) -> tuple[Executor, ...]:
    """The live executors (not the driver) as (id, host), sorted by id; empty if Spark will not
    say (this reads Spark's status store through the JVM gateway)."""
    jvm = sc._jvm  # noqa: SLF001 - py4j's gateway: no public API lists executors with their ids
    try:
        summaries = sc._jsc.sc().statusStore().executorList(True)  # noqa: SLF001 - as above
        listed = jvm.scala.jdk.javaapi.CollectionConverters.asJava(summaries)
        found = [(str(s.id()), str(s.hostPort()).rsplit(":", 1)[0]) for s in listed]
    except Exception as error:  # an optimization only: unpinned tasks are still correct
        log.debug("could not list Spark's executors, tasks stay unpinned: %s", error)
        return ()
    executors = [(eid, host.strip("[]")) for eid, host in found if eid != "driver"]
    return tuple(sorted(executors, key=lambda e: (len(e[0]), e[0])))


def anchor_rdd(sc: Any, locations: list[str]) -> Any:
    """A JVM RDD (a `JavaRDD` of one empty byte array per partition) whose partition p prefers
    `locations[p]`: Spark's `makeRDD` with location preferences, which pyspark lacks."""
    jvm = sc._jvm  # noqa: SLF001 - py4j's gateway, for makeRDD
    items = [jvm.scala.Tuple2(b"", jvm.PythonUtils.toSeq([where])) for where in locations]
    byte_array = jvm.scala.reflect.ClassTag.apply(jvm.java.lang.Class.forName("[B"))
    rdd = sc._jsc.sc().makeRDD(jvm.PythonUtils.toSeq(items), byte_array)  # noqa: SLF001
    return jvm.org.apache.spark.api.java.JavaRDD(rdd, byte_array)


def behind(anchor: Any, rdd: RDD) -> RDD:
    """`rdd`, each of whose partitions yields exactly one serialized batch (one element), zipped
    behind `anchor` in the JVM and stripped of it again there.

    pyspark's own `zip` would add a Python step on each side, and each Python step of a task
    takes a Python worker of its own: task p's write would then land on either of three
    workers, and its producer move between them. In the JVM, the task keeps one Python worker.
    """
    from pyspark import RDD as PySparkRDD

    values = anchor.zip(rdd._jrdd).values()  # noqa: SLF001 - the JVM RDD behind a pyspark RDD
    return PySparkRDD(values, rdd.context, rdd._jrdd_deserializer)  # noqa: SLF001 - as above
