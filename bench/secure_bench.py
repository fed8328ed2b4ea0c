"""Word count over SASL_SSL (SCRAM-SHA-512, TLS) against the same word count over PLAINTEXT.

One secured local broker (`LocalKafkaCluster(secure=True)`) serves both passes in the same run:
the same preloaded topic (the Zipf lines of `bench/wordcount_bench.py`, 4 partitions) is read by
the exactly-once word count (files sink, file journal) once through the PLAINTEXT listener and
once through the SASL_SSL listener with host-name verification. Before them, a pass over a warm-up
topic starts Spark's workers and compiles the JVM's hot paths; then two rounds alternate which
listener goes first, and the best pass of each counts. Batches run back to back, so each figure is
steady-state capacity; the ratio SASL_SSL / PLAINTEXT is the cost of TLS and SASL on the
source's fetches (the sinks here write files, so the source is all that crosses the network).

Usage: python bench/secure_bench.py [--lines N] [--batch-lines N] [--rounds N]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.wordcount_bench import (  # noqa: E402
    INTERVAL_MS,
    PARTITIONS,
    preload,
    run_until_drained,
    steady_rate,
)
from connectors.planner import StartingOffsets  # noqa: E402
from service.driver.lifecycle import BatchLifecycle  # noqa: E402
from service.driver.recovery import JournalLog  # noqa: E402
from service.graph.context import StreamingContext  # noqa: E402
from service.graph.counters import CountersParam  # noqa: E402
from service.graph.functions import add, count_words  # noqa: E402
from service.journal.file import FileJournal  # noqa: E402
from sinks.files import FileSink  # noqa: E402

WARM_UP_LINES = 200_000


def word_count_pass(
    sc: Any, conf: dict[str, str], topic: str, workdir: Path, batch_lines: int
) -> tuple[float, Counter[str]]:
    """Steady-state records/s of the word count over `conf`'s listener, and its totals."""
    ctx = StreamingContext(sc, "secure-bench-" + workdir.name, INTERVAL_MS, default_partitions=4)
    ctx.input_counters = sc.accumulator({}, CountersParam())
    lines = ctx.kafka_stream(
        "lines",
        {**conf, "group.id": "secure-bench"},
        topics=[topic],
        starting_offsets=StartingOffsets.earliest(),
        max_rate_per_partition=batch_lines // PARTITIONS,
    ).values()
    sink = FileSink(workdir / "out")
    lines.map_partitions(count_words).reduce_by_key(add).write("counts", sink)
    journal = FileJournal(workdir / "journal")
    lifecycle = BatchLifecycle(ctx, JournalLog(journal, journal.open(), ctx.graph_json()))
    lifecycle.setup_outputs()
    _times, records, ends = run_until_drained(lifecycle)
    ctx.close()
    journal.close()
    counts: Counter[str] = Counter()
    for t in sink.committed_batches("counts"):
        for word, n in sink.read_batch("counts", t):
            counts[word] += n
    return steady_rate(records, ends), counts


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=600_000)
    parser.add_argument("--batch-lines", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=2, help="passes over each listener")
    args = parser.parse_args()

    from service.dev.brokers import create_topic
    from service.dev.kafka_cluster import LocalKafkaCluster
    from service.dev.kafka_security import ADMIN_USER
    from service.driver.spark import create_spark_context

    with LocalKafkaCluster(secure=True) as cluster, tempfile.TemporaryDirectory() as tmp:
        plain = {"bootstrap.servers": cluster.bootstrap_servers}
        security = cluster.security
        secured = {
            "bootstrap.servers": cluster.sasl_ssl_bootstrap_servers,
            **security.sasl_ssl_properties(ADMIN_USER),
            "sasl.password": security.scram_passwords[ADMIN_USER],
        }
        topic, warm_topic = "secure-bench-lines", "secure-bench-warm-up"
        for name, count in ((topic, args.lines), (warm_topic, WARM_UP_LINES)):
            create_topic(cluster.bootstrap_servers, name, partitions=PARTITIONS)
            preload(cluster.bootstrap_servers, name, count)
        sc = create_spark_context("dstreams-secure-bench", "local[2]")
        word_count_pass(sc, secured, warm_topic, Path(tmp) / "warm", args.batch_lines)
        rates, totals = measure(sc, {"plain": plain, "secure": secured}, topic, tmp, args)
        sc.stop()
    print(f"-- {args.lines:,} lines, batches of up to {args.batch_lines:,} lines, same run")
    for name, label in (("plain", "PLAINTEXT"), ("secure", "SASL_SSL (SCRAM, TLS)")):
        each = ", ".join(f"{rate:,.0f}" for rate in rates[name])
        print(f"dstreams word count over {label}: best {max(rates[name]):,.0f} records/s ({each})")
    ratio = max(rates["secure"]) / max(rates["plain"])
    print(f"ratio SASL_SSL / PLAINTEXT word count (best of {args.rounds}, same run): {ratio:.2f}")
    same = len({tuple(sorted(t.items())) for t in totals}) == 1 and sum(totals[0].values()) > 0
    print(f"word totals equal over both listeners: {same}", flush=True)
    return 0 if same else 1


def measure(
    sc: Any, confs: dict[str, dict[str, str]], topic: str, tmp: str, args: argparse.Namespace
) -> tuple[dict[str, list[float]], list[Counter[str]]]:
    """`args.rounds` passes over each listener, alternating which goes first, so that neither
    always runs on a warmer JVM or a quieter machine."""
    rates: dict[str, list[float]] = {name: [] for name in confs}
    totals: list[Counter[str]] = []
    for round_number in range(args.rounds):
        order = list(confs) if round_number % 2 == 0 else list(reversed(confs))
        for name in order:
            workdir = Path(tmp) / f"{name}{round_number}"
            rate, counts = word_count_pass(sc, confs[name], topic, workdir, args.batch_lines)
            rates[name].append(rate)
            totals.append(counts)
    return rates, totals


if __name__ == "__main__":
    sys.exit(main())
