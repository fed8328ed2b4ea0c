"""Word count on a 2-worker standalone cluster (one core each) beside local[2], in the same run.

Both run the same exactly-once job over the same preloaded topic (lines of 8 words from a
10,000-word Zipf vocabulary, 4 partitions): Kafka source, word count, Kafka sink (one
transaction per output partition and batch), file journal, batches back to back. The cluster
is a real standalone master with two 1-core workers started from pyspark's jars
(`service.dev.spark_cluster`), so both setups have two cores for tasks.

Prints, per setup, steady-state records/s (the first batch, which starts Python workers and
producers, left out), the ratio cluster / local[2] (the target is 0.8 or more), and the fraction
of steady partition-batches whose write had to initialize a transactional producer (each such
initialization fences the id's producer on the other executor or Python worker). The cluster
runs twice: with stable placement off (Spark puts task p wherever a core is free) and on
(`service.graph.placement`: task p prefers executor p mod 2).

Before the measured passes, each SparkContext runs a warm-up word count over its own topic.
Usage: python bench/cluster_bench.py [--lines N] [--batch-lines N]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from connectors.planner import StartingOffsets  # noqa: E402
from service.driver.lifecycle import BatchLifecycle  # noqa: E402
from service.driver.recovery import JournalLog  # noqa: E402
from service.graph.context import StreamingContext  # noqa: E402
from service.graph.counters import CountersParam  # noqa: E402
from service.graph.functions import add, count_words  # noqa: E402
from service.journal.file import FileJournal  # noqa: E402
from sinks.kafka import KafkaSink  # noqa: E402

PARTITIONS = 4
INTERVAL_MS = 1000
EXECUTOR_MEMORY = "512m"


@dataclass
class Pass:
    """One measured run: batch by batch records, seconds, partitions written, producers opened."""

    label: str
    records: list[int] = field(default_factory=list)
    seconds: list[float] = field(default_factory=list)
    ends: list[float] = field(default_factory=list)
    partitions: list[int] = field(default_factory=list)
    opened: list[int] = field(default_factory=list)

    @property
    def steady_rate(self) -> float:
        """Records/s from the end of the first batch to the end of the last one."""
        return sum(self.records[1:]) / (self.ends[-1] - self.ends[0])

    @property
    def steady_reinit_fraction(self) -> float:
        written = sum(self.partitions[1:])
        return sum(self.opened[1:]) / written if written else 0.0

    def report(self, baseline: float | None = None) -> str:
        ratio = f", ratio to local[2] {self.steady_rate / baseline:.2f}" if baseline else ""
        return (
            f"{self.label:<34} {self.steady_rate:>9,.0f} records/s{ratio}; batch p50 "
            f"{statistics.median(self.seconds[1:]):.2f}s; producer initializations in "
            f"{sum(self.opened[1:])}/{sum(self.partitions[1:])} steady partition-batches "
            f"({self.steady_reinit_fraction:.0%}; first batch {self.opened[0]}/"
            f"{self.partitions[0]})"
        )


def run_word_count(
    sc: Any, bootstrap: str, topic: str, workdir: Path, batch_lines: int, pinned: bool, label: str
) -> Pass:
    """The word count to a Kafka sink, batches back to back until the topic is drained."""
    ctx = StreamingContext(sc, "bench-" + workdir.name, INTERVAL_MS, default_partitions=PARTITIONS)
    ctx.input_counters = sc.accumulator({}, CountersParam())
    ctx.placement.active = pinned
    lines = ctx.kafka_stream(
        "lines",
        {"bootstrap.servers": bootstrap, "group.id": "bench"},
        topics=[topic],
        starting_offsets=StartingOffsets.earliest(),
        max_rate_per_partition=batch_lines // PARTITIONS,
    ).values()
    sink = KafkaSink({"bootstrap.servers": bootstrap}, f"{topic}-{workdir.name}", PARTITIONS)
    lines.map_partitions(count_words).reduce_by_key(add).write("counts", sink)
    journal = FileJournal(workdir / "journal")
    lifecycle = BatchLifecycle(ctx, JournalLog(journal, journal.open(), ctx.graph_json()))
    lifecycle.setup_outputs()
    measured = Pass(label)
    batch_time = 1_000_000
    while True:
        outcome = lifecycle.run_new(batch_time)
        batch_time += INTERVAL_MS
        if outcome.input_records == 0:
            break
        measured.ends.append(time.perf_counter())
        measured.records.append(outcome.input_records)
        measured.seconds.append(outcome.processing_s)
        measured.partitions.append(sum(r.partitions for r in outcome.outputs))
        measured.opened.append(sum(r.opened_clients for r in outcome.outputs))
    ctx.close()
    journal.close()
    return measured


def measure(
    master: str, bootstrap: str, topics: tuple[str, str], tmp: Path, batch_lines: int
) -> list[Pass]:
    """A warm-up pass, then the measured pass(es) on one SparkContext of `master`."""
    from service.driver.spark import create_spark_context

    warm_topic, topic = topics
    sc = create_spark_context("dstreams-bench", master, {"spark.executor.memory": EXECUTOR_MEMORY})
    try:
        on_cluster = not master.startswith("local")
        run_word_count(sc, bootstrap, warm_topic, tmp / f"warm{len(master)}", batch_lines, True, "")
        if not on_cluster:
            return [run_word_count(sc, bootstrap, topic, tmp / "local", batch_lines, False, "")]
        return [
            run_word_count(sc, bootstrap, topic, tmp / f"c{int(p)}", batch_lines, p, label)
            for p, label in ((False, "unpinned"), (True, "pinned"))
        ]
    finally:
        sc.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=400_000)
    parser.add_argument("--batch-lines", type=int, default=40_000)
    args = parser.parse_args()

    from service.dev.brokers import create_topic, kafka_endpoint
    from service.dev.spark_cluster import LocalSparkCluster

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from wordcount_bench import preload

    with kafka_endpoint(brokers=1) as bootstrap, tempfile.TemporaryDirectory() as folder:
        tmp = Path(folder)
        topics = (f"cluster-bench-warm-{int(time.time())}", f"cluster-bench-{int(time.time())}")
        for topic, lines in zip(topics, (args.lines // 2, args.lines), strict=True):
            create_topic(bootstrap, topic, partitions=PARTITIONS)
            preload(bootstrap, topic, lines)
        print(f"preloaded {args.lines:,} lines; batches of up to {args.batch_lines:,}", flush=True)
        (local,) = measure("local[2]", bootstrap, topics, tmp, args.batch_lines)
        local.label = "local[2] (2 cores, 1 JVM)"
        print(local.report(), flush=True)
        with LocalSparkCluster(workers=2, cores=1, memory="1g", workdir=tmp / "spark") as cluster:
            passes = measure(cluster.master_url, bootstrap, topics, tmp, args.batch_lines)
        for cluster_pass in passes:
            cluster_pass.label = f"2-worker cluster, {cluster_pass.label}"
            print(cluster_pass.report(local.steady_rate), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
