"""Word-count throughput: dstreams (exactly-once, files sink, file journal) against a baseline.

Both consume the same preloaded topic (1,000,000 lines of 8 words from a 10,000-word Zipf
vocabulary, 4 partitions) on the local broker in the same run:

- baseline: one process, a confluent-kafka consumer and `collections.Counter`, no guarantees;
- dstreams read-only: the Kafka source and a count per batch (the cost of getting records in);
- dstreams word count: the example job with the full batch lifecycle, batches run back to back
  (as the scheduler does when it is behind), so the figure is steady-state capacity;
- dstreams word count over Avro: the same lines as Avro strings (plain Avro binary, .avsc-style
  writer schema) in their own topic, decoded with fastavro; its ratio to the UTF-8 word count at
  the same batch size is the cost of Avro decoding.

Before the measured passes, a word count over a separate 1,000,000-line topic warms Spark up (JVM
compilation, Python workers, Kafka clients), as a long-running service is warm.

Prints records/s of each, the ratio to the baseline, and per-batch processing time p50/p99.
Usage: python bench/wordcount_bench.py [--lines N] [--batch-lines 100000,200000,...]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
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
from sinks.files import FileSink  # noqa: E402

PARTITIONS = 4
WORDS_PER_LINE = 8
VOCABULARY_SIZE = 10_000
INTERVAL_MS = 1000
# Batch sizes tried (the source's rate limit times the interval). The headline is the ratio at
# the largest one all of whose batches after the first (at least MIN_STEADY_BATCHES) fit the
# interval; with 1,000,000 lines that is 200,000 (larger ones need --lines to match).
BATCH_LINES = (100_000, 200_000)
MIN_STEADY_BATCHES = 4
WARM_UP_LINES = 1_000_000


def zipf_vocabulary(rng: random.Random) -> tuple[list[str], list[float]]:
    words = [f"word{i:05d}" for i in range(VOCABULARY_SIZE)]
    weights = [1.0 / (rank + 1) for rank in range(VOCABULARY_SIZE)]
    return words, weights


def preload(
    bootstrap: str, topic: str, lines: int, encode: Callable[[str], bytes] = str.encode
) -> None:
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
            producer.produce(topic, encode(line), partition=(start + i) % PARTITIONS)
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
    sc: Any,
    bootstrap: str,
    topic: str,
    workdir: Path,
    read_only: bool,
    batch_lines: int,
    codec: Any = None,
) -> tuple[float, list[float], Counter[str]]:
    """Runs batches back to back until the topic is drained.

    Returns steady-state records/s (the first batch, which starts Python workers and Kafka
    clients, is left out), every batch's processing time, and the word totals written.
    """
    ctx = StreamingContext(sc, "bench-" + workdir.name, INTERVAL_MS, default_partitions=4)
    ctx.input_counters = sc.accumulator({}, CountersParam())
    source = ctx.kafka_stream(
        "lines",
        {"bootstrap.servers": bootstrap, "group.id": "bench"},
        topics=[topic],
        starting_offsets=StartingOffsets.earliest(),
        max_rate_per_partition=batch_lines // PARTITIONS,
        decoder=codec,
    )
    lines = source.values()
    sink = FileSink(workdir / "out")
    if read_only:
        lines.count().write("counted", sink)
    else:
        lines.map_partitions(count_words).reduce_by_key(add).write("counts", sink)
    journal = FileJournal(workdir / "journal")
    lifecycle = BatchLifecycle(ctx, JournalLog(journal, journal.open(), ctx.graph_json()))
    lifecycle.setup_outputs()
    times, records, ends = run_until_drained(lifecycle)
    ctx.close()
    journal.close()
    counts: Counter[str] = Counter()
    if not read_only:
        for t in sink.committed_batches("counts"):
            for word, n in sink.read_batch("counts", t):
                counts[word] += n
    return steady_rate(records, ends), times, counts


def run_until_drained(lifecycle: BatchLifecycle) -> tuple[list[float], list[int], list[float]]:
    """Runs batches until one reads nothing: each batch's processing seconds and records, and
    the wall clock at each batch's end (the empty last one included)."""
    times: list[float] = []
    records: list[int] = []
    ends: list[float] = []
    batch_time = 1_000_000
    while True:
        outcome = lifecycle.run_new(batch_time)
        ends.append(time.perf_counter())
        batch_time += INTERVAL_MS
        if outcome.input_records == 0:
            return times, records, ends
        times.append(outcome.processing_s)
        records.append(outcome.input_records)


def steady_rate(records: list[int], ends: list[float]) -> float:
    """Records/s from the end of the first batch (workers and clients starting) to the end of
    the last one with data."""
    return sum(records[1:]) / (ends[len(records) - 1] - ends[0])


Pass = tuple[float, list[float], Counter[str]]


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def report_pass(batch_lines: int, base_rate: float, word_count: Pass, read_only: Pass) -> None:
    wc_rate, wc_times, _ = word_count
    read_rate, read_times, _ = read_only
    steady = wc_times[1:]
    print(f"-- batches of up to {batch_lines:,} lines ({len(wc_times)} batches)")
    print(f"dstreams word count (exactly-once, files sink):  {wc_rate:>10,.0f} records/s")
    print(f"dstreams read-only (source + count):             {read_rate:>10,.0f} records/s")
    print(f"ratio word count / baseline: {wc_rate / base_rate:.2f}")
    print(f"ratio read-only  / baseline: {read_rate / base_rate:.2f}")
    print(
        f"word-count processing per batch: first {wc_times[0]:.2f}s, then p50 "
        f"{statistics.median(steady):.2f}s p99 {percentile(steady, 0.99):.2f}s "
        f"(read-only p50 {statistics.median(read_times[1:]):.2f}s)"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=1_000_000)
    parser.add_argument(
        "--batch-lines",
        default=",".join(str(n) for n in BATCH_LINES),
        help="comma-separated: the most lines one batch takes (rate limit times the interval)",
    )
    args = parser.parse_args()
    batch_sizes = [int(n) for n in args.batch_lines.split(",")]

    from service.dev.brokers import create_topic, kafka_endpoint
    from service.driver.spark import create_spark_context

    exact = True
    with kafka_endpoint(brokers=1) as bootstrap, tempfile.TemporaryDirectory() as tmp:
        topic = f"bench-lines-{int(time.time())}"
        create_topic(bootstrap, topic, partitions=PARTITIONS)
        print(f"preloading {args.lines:,} lines into {topic} ...", flush=True)
        preload(bootstrap, topic, args.lines)

        base_rate, expected = baseline(bootstrap, topic, args.lines)
        print(f"baseline (confluent-kafka + Counter, 1 process): {base_rate:>10,.0f} records/s")

        warm_topic = topic + "-warm-up"
        create_topic(bootstrap, warm_topic, partitions=PARTITIONS)
        preload(bootstrap, warm_topic, WARM_UP_LINES)
        sc = create_spark_context("dstreams-bench", "local[2]")
        # Warm-up, outside the measurement: a whole word count over its own topic starts the
        # Python workers and lets the JVM compile its hot paths. Without it the first measured
        # pass runs on interpreted JVM code and its figure mixes start-up with steady state.
        run_dstreams(sc, bootstrap, warm_topic, Path(tmp) / "warm-up", False, batch_sizes[0])
        fitting: dict[int, float] = {}
        utf8: dict[int, float] = {}
        for n in batch_sizes:
            word_count = run_dstreams(sc, bootstrap, topic, Path(tmp) / f"w{n}", False, n)
            utf8[n] = word_count[0]
            read_only = run_dstreams(sc, bootstrap, topic, Path(tmp) / f"r{n}", True, n)
            report_pass(n, base_rate, word_count, read_only)
            same = word_count[2] == expected
            print(f"word totals equal the baseline's: {same}", flush=True)
            exact = exact and same
            steady = word_count[1][1:]
            if len(steady) >= MIN_STEADY_BATCHES and max(steady) <= INTERVAL_MS / 1000:
                fitting[n] = word_count[0] / base_rate
        n = batch_sizes[0]
        avro_exact = avro_pass(sc, bootstrap, topic, Path(tmp), args.lines, n, expected, utf8[n])
        exact = exact and avro_exact
        sc.stop()
    report_capacity(fitting)
    return 0 if exact else 1


def avro_pass(
    sc: Any,
    bootstrap: str,
    topic: str,
    tmp: Path,
    lines: int,
    batch_lines: int,
    expected: Counter[str],
    utf8_rate: float,
) -> bool:
    """The word count over the same lines in Avro; prints its ratio to the UTF-8 word count."""
    from connectors.avro import AvroDecoder, AvroEncoder
    from service.dev.brokers import create_topic

    schema = json.dumps("string")
    avro_topic = topic + "-avro"
    create_topic(bootstrap, avro_topic, partitions=PARTITIONS)
    preload(bootstrap, avro_topic, lines, AvroEncoder(schema))
    decoder = AvroDecoder(writer_schema=schema)
    rate, times, counts = run_dstreams(
        sc, bootstrap, avro_topic, tmp / "avro", False, batch_lines, decoder
    )
    print(f"-- Avro values (fastavro), batches of up to {batch_lines:,} lines")
    print(f"dstreams word count over Avro:                   {rate:>10,.0f} records/s")
    print(f"ratio Avro / UTF-8 word count (same run): {rate / utf8_rate:.2f}")
    print(f"Avro word-count processing per batch p50 {statistics.median(times[1:]):.2f}s")
    same = counts == expected
    print(f"Avro word totals equal the baseline's: {same}", flush=True)
    return same


def report_capacity(ratio_by_batch_lines: dict[int, float]) -> None:
    """The headline: the ratio at the largest batch the service keeps up with (every batch after
    the first within the interval), as a streaming system's capacity is its throughput at a
    sustainable batch size."""
    if not ratio_by_batch_lines:
        print(
            f"capacity: no batch size tried kept {MIN_STEADY_BATCHES}+ batches within the "
            f"{INTERVAL_MS} ms interval"
        )
        return
    lines = max(ratio_by_batch_lines)
    print(
        f"capacity ratio: {ratio_by_batch_lines[lines]:.2f} at {lines:,}-line batches "
        f"(the largest tried whose every steady batch fits the {INTERVAL_MS} ms interval)"
    )


if __name__ == "__main__":
    sys.exit(main())
