"""Stable placement: the write job's RDD zipped behind an anchor keeps its rows and takes the
anchor's preferred executors (checked through Spark's own scheduler)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from service.graph.placement import (
    OutputPlacement,
    anchor_rdd,
    behind,
    live_executors,
    preferred_locations,
)


def report(index: int, rows: Iterable[Any]) -> Iterator[tuple[int, int]]:
    """One element per partition, as an output's write task yields."""
    yield (index, sum(1 for _ in rows))


def test_the_anchored_rdd_yields_the_same_reports(sc: Any) -> None:
    written = sc.parallelize(range(100), 4).mapPartitionsWithIndex(report)
    locations = preferred_locations(4, (("0", "10.0.0.1"), ("1", "10.0.0.2")))
    pinned = behind(anchor_rdd(sc, locations), written)
    assert pinned.collect() == written.collect() == [(0, 25), (1, 25), (2, 25), (3, 25)]


def test_each_partition_prefers_its_anchors_executor(sc: Any) -> None:
    written = sc.parallelize(range(8), 3).mapPartitionsWithIndex(report)
    locations = preferred_locations(3, (("0", "10.0.0.1"), ("1", "10.0.0.2")))
    pinned = behind(anchor_rdd(sc, locations), written)
    as_java = sc._jvm.scala.jdk.javaapi.CollectionConverters.asJava
    scheduler_view = [
        [str(loc) for loc in as_java(sc._jsc.sc().getPreferredLocs(pinned._jrdd.rdd(), p))]
        for p in range(3)
    ]
    assert scheduler_view == [[where] for where in locations]


def test_local_mode_has_no_executor_to_pin_to(sc: Any) -> None:
    assert live_executors(sc) == ()
    placement = OutputPlacement()
    placement.active = True
    written = sc.parallelize(range(4), 2).mapPartitionsWithIndex(report)
    assert placement.pinned(written) is written
