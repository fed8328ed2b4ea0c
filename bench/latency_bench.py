"""Capacity and end-to-end latency of the exactly-once word count to Kafka, against the raw loop.

The raw exactly-once loop is one confluent-kafka process: a read_committed consumer, a word count
per 1 s batch, the counts produced in a Kafka transaction that also commits the consumed offsets
(`send_offsets_to_transaction`). dstreams runs the example word count (Kafka source, Kafka sink,
file journal, `local[2]`). Both run on the same broker in the same run; the machine may be shared,
so read the ratios, not the absolute figures.

1. Capacity: both drain the same preloaded topic (lines of 8 Zipf words, 4 partitions); dstreams
   runs batches back to back (as its scheduler does when behind) after a warm-up pass over the
   same topic. Printed as `capacity ratio (kafka sink, exactly-once): X.XX of the raw ...`.
   Batch size: the raw loop commits whatever it read in 1 s; unless `--batch-lines` says
   otherwise, a dstreams batch holds the raw loop's median records per transaction of this run
   (`max_rate_per_partition` = that / partitions, 1 s interval), so each system's per-commit
   cost is spread over the same input. Steady rates leave out the first batch (start-up) and
   the last (the topic runs out part-way through it), for both.
2. Structured Streaming: PySpark's own word count (`bench/structured_streaming.py`: Kafka
   source and sink, 1 s trigger, running counts in update mode, at-least-once) over the same
   topic in batches of the same size; `vs structured streaming: X.XX×` is dstreams' capacity over
   its steady records/s.
3. Latency: a producer writes lines at a steady rate; one line in `STAMP_EVERY` starts with a
   word `t<produce time in ms>`, which the word count passes to its output as a key of its own. A
   read_committed reader of the output takes now minus that time as the record's end-to-end
   latency. dstreams runs batches on its interval, as the service's scheduler does, and the raw
   loop commits once per interval. Three runs (`LATENCY_RUNS`): 100,000 lines/s at 1 s, 50,000 at
   250 ms and 20,000 at 100 ms, each against the raw loop at the same rate and interval.

Every pass runs with dstreams' defaults: the task layout (read tasks, shuffle partitions) is what
`service.graph.layout` chooses per batch, and the Kafka sink writes where `write_from: auto`
says. `--shuffle-partitions` and `--read-tasks` fix them instead, to compare.

With ``--write-from driver,executors`` the dstreams passes run once per placement of the Kafka
sink's transactions (`sinks.kafka`, ``write_from``), in the same run against the same raw loop.

Usage: python bench/latency_bench.py [--lines N] [--rate LINES_PER_S] [--seconds S]
       [--write-from auto|driver|executors[,...]] [--batch-lines N]
       [--shuffle-partitions N] [--read-tasks N] [--no-structured] [--only-latency]
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from connectors.planner import StartingOffsets  # noqa: E402
from service.config.masters import parse_master  # noqa: E402
from service.driver.lifecycle import BatchLifecycle  # noqa: E402
from service.driver.recovery import JournalLog  # noqa: E402
from service.graph.context import StreamingContext  # noqa: E402
from service.graph.counters import CountersParam  # noqa: E402
from service.graph.functions import add, count_words  # noqa: E402
from service.journal.file import FileJournal  # noqa: E402
from sinks.kafka import KafkaSink  # noqa: E402

PARTITIONS = 4
WORDS_PER_LINE = 8
INTERVAL_MS = 1000
# The back-to-back batch size of the capacity pass; 0: what the raw loop commits per 1 s
# transaction in this run (rounded down to BATCH_LINES_STEP). Set once in main().
CAPACITY_BATCH_LINES = 0
BATCH_LINES_STEP = 10_000
# Partitions of the word count's shuffle (the output's tasks) and the most tasks that read a
# batch (the source's max_partitions); None: dstreams chooses (the default a user gets).
# --shuffle-partitions and --read-tasks fix them.
CORES = os.cpu_count() or 1
SHUFFLE_PARTITIONS: int | None = None
READ_TASKS: int | None = None
# (lines/s, interval ms) of the latency runs; --rate changes the first one's rate.
LATENCY_RUNS = [(100_000, 1000), (50_000, 250), (20_000, 100)]
# One line in this many carries its produce time; at 100,000 lines/s that is 1,000 samples/s.
STAMP_EVERY = 100
# Latency samples of the first seconds (Spark's first jobs, the first transactions) are left out.
SETTLE_S = 5.0


def line_pool(size: int = 20_000) -> list[str]:
    rng = random.Random(1)  # noqa: S311 - benchmark data
    words = [f"word{i:05d}" for i in range(10_000)]
    weights = [1.0 / (rank + 1) for rank in range(len(words))]
    picked = rng.choices(words, weights, k=size * WORDS_PER_LINE)
    return [" ".join(picked[i * WORDS_PER_LINE : (i + 1) * WORDS_PER_LINE]) for i in range(size)]


def produce_steadily(bootstrap: str, topic: str, rate: int, seconds: float) -> float:
    """Writes `rate` lines/s for `seconds` (every STAMP_EVERY-th stamped); returns the rate
    achieved."""
    from confluent_kafka import Producer

    pool = line_pool()
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 5,
            "acks": "all",
            "queue.buffering.max.messages": 1_000_000,
        }
    )
    tick_s = 0.01
    per_tick = max(1, int(rate * tick_s))
    sent = 0
    started = time.monotonic()
    while (now := time.monotonic()) - started < seconds:
        due = int((now - started) * rate) + per_tick
        while sent < due:
            line = pool[sent % len(pool)]
            if sent % STAMP_EVERY == 0:
                line = f"t{int(time.time() * 1000)} {line}"
            try:
                producer.produce(topic, line.encode(), partition=sent % PARTITIONS)
            except BufferError:  # the client's queue is full: let it send, then go on
                producer.poll(0.01)
                continue
            sent += 1
        producer.poll(0)
        time.sleep(max(0.0, started + (sent / rate) - time.monotonic()))
    producer.flush(60)
    return sent / (time.monotonic() - started)


class LatencyReader(threading.Thread):
    """A read_committed reader of the output topic: the latency of every stamp it sees."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        super().__init__(daemon=True)
        from confluent_kafka import Consumer

        self.consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": f"latency-{topic}",
                "isolation.level": "read_committed",
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
                "fetch.wait.max.ms": 10,
                "fetch.queue.backoff.ms": 10,
            }
        )
        self.consumer.subscribe([topic])
        self.samples: list[tuple[float, float]] = []  # (produced at, latency)
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            for message in self.consumer.consume(1000, 0.05):
                key = message.key() if message.error() is None else None
                if key and key[:1] == b"t" and key[1:].isdigit():
                    produced = int(key[1:]) / 1000
                    self.samples.append((produced, time.time() - produced))
        self.consumer.close()


def raw_loop(
    bootstrap: str,
    topic: str,
    out: str,
    until: Callable[[int], bool],
    interval_s: float = INTERVAL_MS / 1000,
) -> list[tuple[int, float]]:
    """The raw exactly-once loop, one transaction per `interval_s`, until `until(records so
    far)`; (records, end time) per batch."""
    from confluent_kafka import Consumer, Producer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"raw-{out}",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "fetch.queue.backoff.ms": 10,
        }
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"raw-{out}"})
    producer.init_transactions()
    batches: list[tuple[int, float]] = []
    seen = 0
    while not until(seen):
        counts, n = _consume_for(consumer, interval_s)
        producer.begin_transaction()
        for word, count in counts.items():
            producer.produce(out, str(count).encode(), word.encode())
        positions = consumer.position(consumer.assignment())
        producer.send_offsets_to_transaction(positions, consumer.consumer_group_metadata())
        producer.commit_transaction()
        seen += n
        batches.append((n, time.perf_counter()))
    consumer.close()
    return batches


def _consume_for(consumer: Any, seconds: float) -> tuple[Counter[str], int]:
    counts: Counter[str] = Counter()
    n = 0
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        for message in consumer.consume(10_000, min(left, 0.05)):
            if message.error() is None:
                counts.update(message.value().decode().lower().split())
                n += 1
    return counts, n


def steady_rate(batches: list[tuple[int, float]]) -> float:
    """Records/s from the end of the first batch with data to the end of the last full one.

    The last batch is partial (the topic ran out during it), so it is left out when at least two
    batches remain after the first: the raw loop's last transaction waits out its whole second,
    and a dstreams batch pays its fixed cost for fewer records."""
    full = [(n, end) for n, end in batches if n]
    if len(full) >= 4:
        full = full[:-1]
    return sum(n for n, _ in full[1:]) / (full[-1][1] - full[0][1])


def per_transaction(batches: list[tuple[int, float]]) -> int:
    """The raw loop's median records per 1 s transaction, first and last left out as above,
    rounded down to BATCH_LINES_STEP (at least one step)."""
    counts = [n for n, _ in batches if n]
    middle = counts[1:-1] or counts
    return max(
        BATCH_LINES_STEP, int(statistics.median(middle)) // BATCH_LINES_STEP * BATCH_LINES_STEP
    )


def word_count(
    sc: Any,
    bootstrap: str,
    topic: str,
    workdir: Path,
    batch_lines: int | None,
    write_from: Any,
    interval_ms: int = INTERVAL_MS,
) -> Any:
    """The example word count to a Kafka sink; returns (lifecycle, context, journal, output)."""
    ctx = StreamingContext(
        sc, "bench-" + workdir.name, interval_ms, default_partitions=SHUFFLE_PARTITIONS
    )
    ctx.input_counters = sc.accumulator({}, CountersParam())
    lines = ctx.kafka_stream(
        "lines",
        {"bootstrap.servers": bootstrap, "group.id": "bench"},
        topics=[topic],
        starting_offsets=StartingOffsets.earliest(),
        max_rate_per_partition=batch_lines // PARTITIONS if batch_lines else None,
        max_partitions=READ_TASKS,
    ).values()
    out = f"{topic}-{workdir.name}"
    local = parse_master(sc.master).is_local  # `auto` decided from the master, as the wiring does
    sink = KafkaSink(
        {"bootstrap.servers": bootstrap}, out, PARTITIONS, write_from=write_from, local_master=local
    )
    lines.map_partitions(count_words).reduce_by_key(add).write("counts", sink)
    journal = FileJournal(workdir / "journal")
    lifecycle = BatchLifecycle(ctx, JournalLog(journal, journal.open(), ctx.graph_json()))
    lifecycle.setup_outputs()
    return lifecycle, ctx, journal, out


def dstreams_capacity(
    sc: Any, bootstrap: str, topic: str, workdir: Path, write_from: Any
) -> tuple[float, Any]:
    """Back-to-back batches until the topic is drained: steady records/s and the outcomes."""
    lifecycle, ctx, journal, _ = word_count(
        sc, bootstrap, topic, workdir, CAPACITY_BATCH_LINES, write_from
    )
    batches: list[tuple[int, float]] = []
    outcomes = []
    batch_time = 1_000_000
    while (outcome := lifecycle.run_new(batch_time)).input_records:
        batches.append((outcome.input_records, time.perf_counter()))
        outcomes.append(outcome)
        batch_time += INTERVAL_MS
    ctx.close()
    journal.close()
    return steady_rate(batches), outcomes


def dstreams_on_interval(lifecycle: Any, stop: threading.Event, interval_ms: int) -> list[Any]:
    """Runs batches on the interval's boundaries (at once when behind), as the scheduler does."""
    outcomes = []
    batch_time = (int(time.time() * 1000) // interval_ms + 1) * interval_ms
    while not stop.is_set():
        wait = batch_time / 1000 - time.time()
        if wait > 0:
            time.sleep(wait)
        delay = max(0.0, time.time() - batch_time / 1000)
        outcomes.append(lifecycle.run_new(batch_time, scheduling_delay_s=delay))
        now_ms = int(time.time() * 1000)
        batch_time = max(batch_time + interval_ms, now_ms // interval_ms * interval_ms)
    return outcomes


def latencies(samples: list[tuple[float, float]], since: float) -> tuple[float, float, int]:
    kept = sorted(latency for produced, latency in samples if produced >= since)
    if not kept:
        return float("nan"), float("nan"), 0
    return statistics.median(kept), kept[min(len(kept) - 1, int(0.99 * len(kept)))], len(kept)


Latency = tuple[float, float, int]  # p50 s, p99 s, samples


def print_latency(
    label: str, rate: int, interval_ms: int, achieved: float, result: Latency
) -> None:
    p50, p99, n = result
    print(
        f"{label}e2e latency at {rate} lines/s, {interval_ms} ms interval: p50 {p50:.2f} s, "
        f"p99 {p99:.2f} s  [{n} samples, produced {achieved:,.0f} lines/s]",
        flush=True,
    )


def print_summary(
    dstreams: dict[tuple[int, int], Latency],
    raw: dict[tuple[int, int], Latency],
    batch_times: dict[tuple[int, int], list[float]],
) -> None:
    """The issue's lines: each run's latency against its interval or the raw loop's, and the
    batch times of the 1 s run (its first SETTLE_S left out)."""
    print("--- summary (dstreams defaults; raw loop at the same rate and interval) ---")
    for (rate, interval_ms), (p50, p99, _) in dstreams.items():
        raw_p99 = raw.get((rate, interval_ms), (0.0, float("nan"), 0))[1]
        where = "" if interval_ms == INTERVAL_MS else f", {interval_ms} ms interval"
        against = (
            f"{p99 * 1000 / interval_ms:.2f} × interval"
            if interval_ms == INTERVAL_MS
            else f"{p99 / raw_p99:.2f} × raw loop"
        )
        print(f"e2e latency at {rate} lines/s{where}: p50 {p50:.2f} s, p99 {p99:.2f} s ({against})")
        if interval_ms != INTERVAL_MS:
            raw_p50 = raw.get((rate, interval_ms), (float("nan"),))[0]
            print(f"  raw loop there: p50 {raw_p50:.2f} s, p99 {raw_p99:.2f} s")
    for (rate, interval_ms), seconds in batch_times.items():
        if interval_ms == INTERVAL_MS and seconds:
            print(
                f"batch time at {rate} lines/s: median {statistics.median(seconds):.2f} s, "
                f"max {max(seconds):.2f} s",
                flush=True,
            )


def _produce_in_child(bootstrap: str, topic: str, rate: int, seconds: float, result: Any) -> None:
    result.put(produce_steadily(bootstrap, topic, rate, seconds))


def produce_elsewhere(bootstrap: str, topic: str, rate: int, seconds: float) -> float:
    """`produce_steadily` in a process of its own, so that it neither waits for nor slows down
    the Python threads measured here."""
    import multiprocessing

    spawn = multiprocessing.get_context("spawn")
    result = spawn.Queue()
    child = spawn.Process(target=_produce_in_child, args=(bootstrap, topic, rate, seconds, result))
    child.start()
    achieved = float(result.get(timeout=seconds + 120))
    child.join()
    return achieved


def breakdown_summary(label: str, outcomes: list[Any]) -> None:
    """What the batch breakdown shows: median seconds per step, jobs per batch, the slowest
    batch, and how often a Kafka-sink write had to initialize a producer."""
    steady = outcomes[1:] or outcomes
    steps: dict[str, list[float]] = {}
    for outcome in steady:
        for step, seconds in outcome.steps.items():
            steps.setdefault(step, []).append(seconds)
    jobs = [job for o in steady for r in o.outputs for job in r.jobs]
    writes = [r.write_seconds for o in steady for r in o.outputs if r.partitions]
    commits = [r.commit_seconds for o in steady for r in o.outputs if r.partitions]
    opened = sum(r.opened_clients for o in steady for r in o.outputs)
    written = sum(r.partitions for o in steady for r in o.outputs)
    medians = ", ".join(f"{step} {statistics.median(v):.3f}" for step, v in steps.items())
    last_jobs = [job for r in steady[-1].outputs for job in r.jobs]
    described = "; ".join(
        f"{job.name} ({job.stages} stages, {job.tasks} tasks, {job.seconds:.3f} s)"
        for job in last_jobs
    )
    print(f"{label} the last batch's Spark jobs: {described}")
    print(f"{label} batch breakdown, median s: {medians}")
    print(
        f"{label} spark jobs per batch {len(jobs) / len(steady):.1f} (median job "
        f"{statistics.median(j.seconds for j in jobs) if jobs else 0:.3f} s), slowest sink write "
        f"median {statistics.median(writes) if writes else 0:.3f} s, sink commit median "
        f"{statistics.median(commits) if commits else 0:.3f} s; producer initializations "
        f"{opened}/{written} partition-batches; processing median "
        f"{statistics.median(o.processing_s for o in steady):.2f} s, max "
        f"{max(o.processing_s for o in steady):.2f} s",
        flush=True,
    )


def measure_raw_capacity(bootstrap: str, topic: str, lines: int) -> tuple[float, int]:
    """The raw loop's steady records/s and its median records per transaction."""
    raw = raw_loop(bootstrap, topic, topic + "-raw", lambda seen: seen >= lines)
    raw_rate = steady_rate(raw)
    print(f"raw exactly-once loop (confluent-kafka, 1 s transactions): {raw_rate:>9,.0f} records/s")
    return raw_rate, per_transaction(raw)


def describe_batches(raw_per_transaction: int, requested: int) -> None:
    """Says how the capacity passes size their batches (`requested`; 0: like the raw loop)."""
    chosen = requested or raw_per_transaction
    if not requested:
        why = (
            f"the raw loop's median records per 1 s transaction in this run "
            f"({raw_per_transaction:,}), so a batch's commit covers as much input as one of the "
            "raw loop's"
        )
    else:
        why = (
            f"set by --batch-lines (the raw loop committed {raw_per_transaction:,} per transaction)"
        )
    print(
        f"capacity batches: {chosen:,} lines (max_rate_per_partition {chosen // PARTITIONS:,} "
        f"at the 1 s interval), run back to back as the scheduler does when behind: {why}",
        flush=True,
    )


def measure_capacity(
    sc: Any, bootstrap: str, topic: str, raw_rate: float, tmp: Path, write_from: str
) -> float:
    """Prints the capacity ratio; returns dstreams' steady records/s."""
    label = f"[write_from={write_from}] "
    # JIT, Python workers, producers
    dstreams_capacity(sc, bootstrap, topic, tmp / f"warm-up-{write_from}", write_from)
    rate, outcomes = dstreams_capacity(
        sc, bootstrap, topic, tmp / f"capacity-{write_from}", write_from
    )
    print(f"{label}dstreams word count (kafka sink, exactly-once): {rate:>9,.0f} records/s")
    print(
        f"{label}capacity ratio (kafka sink, exactly-once): {rate / raw_rate:.2f} of the raw "
        "exactly-once loop",
        flush=True,
    )
    breakdown_summary(f"{label}capacity pass:", outcomes)
    return rate


def measure_structured(bootstrap: str, topic: str, lines: int, dstreams_rate: float) -> None:
    """PySpark's Structured Streaming word count over the same topic and batch size."""
    import subprocess

    script = Path(__file__).resolve().parent / "structured_streaming.py"
    args = [bootstrap, topic, str(lines), str(CAPACITY_BATCH_LINES), str(PARTITIONS)]
    done = subprocess.run(  # noqa: S603 - our own script, with our own arguments
        [sys.executable, str(script), *args], capture_output=True, text=True, check=False
    )
    reported = [line for line in done.stdout.splitlines() if line.startswith("records/s ")]
    if done.returncode != 0 or not reported:
        print(f"structured streaming failed ({done.returncode}): {done.stderr[-2000:]}")
        return
    print(done.stdout.splitlines()[0])
    rate = float(reported[-1].split()[1])
    print(f"structured streaming word count (kafka sink, at-least-once): {rate:>9,.0f} records/s")
    print(f"vs structured streaming: {dstreams_rate / rate:.2f}×", flush=True)


def measure_dstreams_latency(
    sc: Any,
    bootstrap: str,
    topic: str,
    run: tuple[int, int],
    seconds: float,
    tmp: Path,
    write_from: str,
) -> tuple[Latency, list[float]]:
    """One latency run; its latency and the processing seconds of its steady batches."""
    from service.dev.brokers import create_topic

    rate, interval_ms = run
    topic = f"{topic}-{write_from}-{rate}-{interval_ms}"
    create_topic(bootstrap, topic, partitions=PARTITIONS)
    workdir = tmp / f"latency-{write_from}-{rate}-{interval_ms}"
    lifecycle, ctx, journal, out = word_count(
        sc, bootstrap, topic, workdir, None, write_from, interval_ms
    )
    reader = LatencyReader(bootstrap, out)
    reader.start()
    stop = threading.Event()
    outcomes: list[Any] = []
    scheduler = threading.Thread(
        target=lambda: outcomes.extend(dstreams_on_interval(lifecycle, stop, interval_ms))
    )
    scheduler.start()
    since = time.time() + SETTLE_S
    achieved = produce_elsewhere(bootstrap, topic, rate, seconds)
    time.sleep(max(3.0, 3 * interval_ms / 1000))  # the last records through a batch and commit
    stop.set()
    scheduler.join()
    reader.stop.set()
    reader.join()
    ctx.close()
    journal.close()
    label = f"[write_from={write_from}] "
    result = latencies(reader.samples, since)
    print_latency(label, rate, interval_ms, achieved, result)
    steady = [o for o in outcomes if o.plan.batch_time / 1000 >= since and o.input_records]
    breakdown_summary(f"{label}latency pass:", steady)
    describe_layouts(f"{label}latency pass:", steady)
    return result, [o.processing_s for o in steady]


def describe_layouts(label: str, outcomes: list[Any]) -> None:
    """How many tasks the defaults chose for the batches (`service.graph.layout`)."""
    chosen = Counter(o.plan.layout.tasks if o.plan.layout else None for o in outcomes)
    described = ", ".join(
        f"{count} batches in {'fixed tasks' if tasks is None else f'{tasks} tasks'}"
        for tasks, count in sorted(chosen.items(), key=lambda item: (item[0] is None, item[0]))
    )
    print(f"{label} task layout chosen: {described or 'no batches'}", flush=True)


def measure_raw_latency(
    bootstrap: str, topic: str, run: tuple[int, int], seconds: float
) -> Latency:
    from service.dev.brokers import create_topic

    rate, interval_ms = run
    topic = f"{topic}-{rate}-{interval_ms}"
    create_topic(bootstrap, topic, partitions=PARTITIONS)
    create_topic(bootstrap, topic + "-out", partitions=PARTITIONS)
    reader = LatencyReader(bootstrap, topic + "-out")
    reader.start()
    stop = threading.Event()
    loop = threading.Thread(
        target=raw_loop,
        args=(bootstrap, topic, topic + "-out", lambda _: stop.is_set(), interval_ms / 1000),
    )
    loop.start()
    since = time.time() + SETTLE_S
    achieved = produce_elsewhere(bootstrap, topic, rate, seconds)
    time.sleep(max(3.0, 3 * interval_ms / 1000))
    stop.set()
    loop.join()
    reader.stop.set()
    reader.join()
    result = latencies(reader.samples, since)
    print_latency("raw loop ", rate, interval_ms, achieved, result)
    return result


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=2_000_000)
    parser.add_argument(
        "--rate", type=int, default=LATENCY_RUNS[0][0], help="lines/s of the 1 s latency run"
    )
    parser.add_argument("--seconds", type=float, default=20.0, help="length of each latency run")
    parser.add_argument(
        "--write-from", default="auto", help="comma-separated Kafka-sink placements to compare"
    )
    parser.add_argument(
        "--batch-lines",
        type=int,
        default=0,
        help="lines per back-to-back batch of the capacity passes (default: the raw loop's "
        "records per 1 s transaction in the same run)",
    )
    parser.add_argument(
        "--shuffle-partitions",
        type=int,
        default=0,
        help="the word count's reduce tasks (default 0: dstreams chooses per batch)",
    )
    parser.add_argument(
        "--read-tasks",
        type=int,
        default=0,
        help="most tasks reading a batch, the source's max_partitions (default 0: dstreams "
        "chooses per batch; with --shuffle-partitions, one per partition)",
    )
    parser.add_argument("--no-structured", action="store_true", help="skip Structured Streaming")
    parser.add_argument(
        "--only-latency", action="store_true", help="skip the capacity passes and Structured"
    )
    return parser.parse_args()


def main() -> int:
    global CAPACITY_BATCH_LINES, SHUFFLE_PARTITIONS, READ_TASKS  # one setting for every pass
    args = parse_args()
    placements = args.write_from.split(",")
    SHUFFLE_PARTITIONS = args.shuffle_partitions or None
    READ_TASKS = args.read_tasks or None
    runs = [(args.rate, LATENCY_RUNS[0][1]), *LATENCY_RUNS[1:]]
    print(
        f"dstreams tasks per batch: {READ_TASKS or 'chosen by dstreams'} reading {PARTITIONS} "
        f"partitions, {SHUFFLE_PARTITIONS or 'chosen by dstreams'} reducing ({CORES} cores)",
        flush=True,
    )

    from wordcount_bench import preload

    from service.dev.brokers import create_topic, kafka_endpoint
    from service.driver.spark import create_spark_context

    with kafka_endpoint(brokers=1) as bootstrap, tempfile.TemporaryDirectory() as tmp:
        topic = f"latency-bench-{int(time.time())}"
        sc = create_spark_context("dstreams-latency-bench", "local[2]")
        rates = [0.0]
        if not args.only_latency:
            create_topic(bootstrap, topic, partitions=PARTITIONS)
            print(f"preloading {args.lines:,} lines into {topic} ...", flush=True)
            preload(bootstrap, topic, args.lines)
            raw_rate, raw_per_transaction = measure_raw_capacity(bootstrap, topic, args.lines)
            CAPACITY_BATCH_LINES = args.batch_lines or raw_per_transaction
            describe_batches(raw_per_transaction, args.batch_lines)
            rates = [
                measure_capacity(sc, bootstrap, topic, raw_rate, Path(tmp), w) for w in placements
            ]
        dstreams: dict[tuple[int, int], Latency] = {}
        batch_times: dict[tuple[int, int], list[float]] = {}
        for write_from in placements:
            for run in runs:
                dstreams[run], batch_times[run] = measure_dstreams_latency(
                    sc, bootstrap, topic + "-d", run, args.seconds, Path(tmp), write_from
                )
        sc.stop()
        if not (args.no_structured or args.only_latency):
            measure_structured(bootstrap, topic, args.lines, max(rates))
        raw = {run: measure_raw_latency(bootstrap, topic + "-r", run, args.seconds) for run in runs}
        print_summary(dstreams, raw, batch_times)
    return 0


if __name__ == "__main__":
    sys.exit(main())
