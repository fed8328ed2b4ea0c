"""Word-count throughput: dstreams (exactly-once, files sink, file journal) against a baseline.

Both consume the same preloaded topic (1,000,000 lines of 8 words from a 10,000-word Zipf
vocabulary, 4 partitions) on the local broker in the same run:

- baseline: one process, a confluent-kafka consumer and `collections.Counter`, no guarantees;
- dstreams read-only: the Kafka source and a count per batch (the cost of getting records in);
- dstreams word count: the example job with the full batch lifecycle, batches run back to back
  (as the scheduler does when it is behind), so the figure is steady-state capacity.

Prints records/s of each, the ratio to the baseline, and per-batch processing time p50/p99.
Usage: python bench/wordcount_bench.py [--lines N]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from service.context import StreamingContext  # noqa: E402
from service.counters import CountersParam  # noqa: E402
from service.functions import add, count_words  # noqa: E402
from service.journal.file import FileJournal  # noqa: E402
from service.lifecycle import BatchLifecycle  # noqa: E402
from service.recovery import JournalLog  # noqa: E402
from sinks.files import FileSink  # noqa: E402

PARTITIONS = 4
WORDS_PER_LINE = 8
VOCABULARY_SIZE = 10_000
INTERVAL_MS = 1000
RATE_PER_PARTITION = 25_000  # 100,000 lines per batch: ten batches, each well filled


def zipf_vocabulary(rng: random.Random) -> tuple[list[str], list[float]]:
    words = [f"word{i:05d}" for i in range(VOCABULARY_SIZE)]
    weights = [1.0 / (rank + 1) for rank in range(VOCABULARY_SIZE)]
    return words, weights


def preload(bootstrap: str, topic: str, lines: int) -> None:
    from confluent_kafka import Producer

    rng = random.Random(1)  # noqa: S311 - benchmark data
    words, weights = zipf_vocabulary(rng)
    producer = Producer(
        {"bootstrap.servers": bootstrap, "linger.ms": 50, "batch.num.messages": 10000}
    )
    chunk = 10_000
    for start in range(0, lines, chunk):
        picked = rng.choices(words, weights, k=chunk * WORDS_PER_LINE)
        for i in range(min(chunk, lines - start)):
            line = " ".join(picked[i * WORDS_PER_LINE : (i + 1) * WORDS_PER_LINE])
            producer.produce(topic, line.encode(), partition=(start + i) % PARTITIONS)
            if i % 1000 == 0:
                producer.poll(0)
    if producer.flush(120) != 0:
        msg = "could not preload the benchmark topic"
        raise RuntimeError(msg)


def baseline(bootstrap: str, topic: str, lines: int) -> tuple[float, Counter[str]]:
    """Records/s of a plain single-process consumer counting words."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "bench-baseline",
            "enable.auto.commit": False,
            "fetch.queue.backoff.ms": 10,
        }
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    counts: Counter[str] = Counter()
    seen = 0
    started = time.perf_counter()
    while seen < lines:
        for message in consumer.consume(10_000, 1.0):
            if message.error() is None:
                counts.update(message.value().decode().lower().split())
                seen += 1
    elapsed = time.perf_counter() - started
    consumer.close()
    return seen / elapsed, counts


def run_dstreams(
    sc: Any, bootstrap: str, topic: str, workdir: Path, read_only: bool
) -> tuple[float, list[float], Counter[str]]:
    """Runs batches back to back until the topic is drained.

    Returns steady-state records/s (the first batch, which starts Python workers and Kafka
    clients, is left out), every batch's processing time, and the word totals written.
    """
    ctx = StreamingContext(sc, "bench-" + workdir.name, INTERVAL_MS, default_partitions=4)
    ctx.input_counters = sc.accumulator({}, CountersParam())
    lines = ctx.kafka_stream(
        "lines",
        {"bootstrap.servers": bootstrap, "group.id": "bench"},
        topics=[topic],
        starting_offsets="earliest",
        max_rate_per_partition=RATE_PER_PARTITION,
    ).values()
    sink = FileSink(workdir / "out")
    if read_only:
        lines.count().write("counted", sink)
    else:
        lines.map_partitions(count_words).reduce_by_key(add).write("counts", sink)
    journal = FileJournal(workdir / "journal")
    lifecycle = BatchLifecycle(ctx, JournalLog(journal, journal.open(), ctx.graph_json()))
    lifecycle.setup_outputs()
    times: list[float] = []
    records: list[int] = []
    ends: list[float] = []
    batch_time = 1_000_000
    while True:
        outcome = lifecycle.run_new(batch_time)
        ends.append(time.perf_counter())
        batch_time += INTERVAL_MS
        if outcome.input_records == 0:
            break
        times.append(outcome.processing_s)
        records.append(outcome.input_records)
    ctx.close()
    journal.close()
    counts: Counter[str] = Counter()
    if not read_only:
        for t in sink.committed_batches("counts"):
            for word, n in sink.read_batch("counts", t):
                counts[word] += n
    # Wall time from the end of the first batch to the end of the last one with data.
    steady_rate = sum(records[1:]) / (ends[len(records) - 1] - ends[0])
    return steady_rate, times, counts


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=1_000_000)
    args = parser.parse_args()

    from service.dev.brokers import create_topic, kafka_endpoint
    from service.spark import create_spark_context

    with kafka_endpoint(brokers=1) as bootstrap, tempfile.TemporaryDirectory() as tmp:
        topic = f"bench-lines-{int(time.time())}"
        create_topic(bootstrap, topic, partitions=PARTITIONS)
        print(f"preloading {args.lines:,} lines into {topic} ...", flush=True)
        preload(bootstrap, topic, args.lines)

        base_rate, expected = baseline(bootstrap, topic, args.lines)
        print(f"baseline (confluent-kafka + Counter, 1 process): {base_rate:>10,.0f} records/s")

        sc = create_spark_context("dstreams-bench", "local[2]")
        # Warm-up: start the Python workers and JVM code paths once, outside the measurement.
        sc.parallelize(range(1000), 2).map(str).count()
        wc_rate, wc_times, counts = run_dstreams(sc, bootstrap, topic, Path(tmp) / "w", False)
        read_rate, read_times, _ = run_dstreams(sc, bootstrap, topic, Path(tmp) / "r", True)
        sc.stop()

    exact = counts == expected
    print(f"dstreams read-only (source + count):             {read_rate:>10,.0f} records/s")
    print(f"dstreams word count (exactly-once, files sink):  {wc_rate:>10,.0f} records/s")
    print(f"ratio word count / baseline: {wc_rate / base_rate:.2f}")
    print(f"ratio read-only  / baseline: {read_rate / base_rate:.2f}")
    steady = wc_times[1:]
    print(
        f"word-count batches: {len(wc_times)} of up to {RATE_PER_PARTITION * PARTITIONS:,} "
        f"records; first (warm-up) {wc_times[0]:.2f}s; steady processing p50 "
        f"{statistics.median(steady):.2f}s p99 {percentile(steady, 0.99):.2f}s"
    )
    print(
        f"read-only batches: steady processing p50 {statistics.median(read_times[1:]):.2f}s "
        "(the part of each word-count batch spent getting records from Kafka into Python)"
    )
    print(f"word totals equal the baseline's: {exact}")
    return 0 if exact else 1


if __name__ == "__main__":
    sys.exit(main())
