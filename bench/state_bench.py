"""Stateful throughput, checkpoint cost and recovery time with large state.

Three figures, each measured on a local broker in the same run:

1. **Running word count against word count.** Both consume the same preloaded topic (1,000,000
   lines of 8 words drawn uniformly from 200,000 words, 4 partitions) with the full batch
   lifecycle (file journal, files sink), batches back to back: the stateless job writes each
   batch's counts; the stateful one keeps every word's total with `update_state_by_key`
   (checkpointed every 5 batches, included in its time) and writes the changed totals. Printed
   per batch size: records/s of each and their ratio (target >= 0.7).
2. **Checkpoint seconds per million keys**, from the checkpoints of the stateful passes.
3. **SIGKILL to next completed batch with 1,000,000 keys of state.** `examples.running_totals`
   runs as a `dstreams run` subprocess (files sink) while a producer streams lines; once a
   checkpoint holds 1,000,000 keys the driver is SIGKILLed and started again, a few times;
   printed per kill and as the median (target <= 10 s). Cold: the killed driver is started
   again. Warm: two `--standby` drivers; the waiting one has pre-loaded the latest checkpoint
   (warm state, `service.driver.warm_state`) and takes over; the killed one comes back as the
   next standby. Each row notes the load average and whether the pre-loaded state was reused.

4. **Live state query latency under load.** One more running word count pass (the first batch
   size), its state made queryable, while a thread asks for one random word's total
   (`QueryableStates.lookup`, the work behind `GET /state/<name>/<key>`) 50 ms after each
   answer as batches run back to back: p50, p99 and max seconds per answered query, and the pass's
   records/s beside the plain pass's (what the queries cost the batches). `--skip-queries`.

Before the measured passes a stateless word count over its own topic warms Spark up. Not a test:
it prints figures and asserts only that the totals are exact.
Usage: python bench/state_bench.py [--lines N] [--keys N] [--batch-lines 100000,200000]
    [--recovery-keys N] [--kills N] [--recovery cold,warm] [--skip-recovery] [--skip-throughput]
    [--skip-queries] [--keep-log FILE]
"""

from __future__ import annotations

import argparse
import os
import random
import re
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench.wordcount_bench import run_until_drained, steady_rate  # noqa: E402
from connectors.planner import StartingOffsets  # noqa: E402
from service.cli.hash_seed import restart_with_hash_seed  # noqa: E402
from service.driver.checkpoints import StateCheckpoints  # noqa: E402
from service.driver.lifecycle import BatchLifecycle  # noqa: E402
from service.driver.recovery import JournalLog  # noqa: E402
from service.graph.checkpoint_store import CheckpointStore  # noqa: E402
from service.graph.context import StreamingContext  # noqa: E402
from service.graph.counters import CountersParam  # noqa: E402
from service.graph.dstream import DStream  # noqa: E402
from service.graph.functions import add, count_words  # noqa: E402
from service.graph.queryable import QueryableStates, QueryUnavailable  # noqa: E402
from service.journal.file import FileJournal  # noqa: E402
from sinks.files import FileSink  # noqa: E402

PARTITIONS = 4
WORDS_PER_LINE = 8
INTERVAL_MS = 1000
BATCH_LINES = (100_000, 200_000)
WARM_UP_LINES = 500_000
# Every 5 batches, so that each measured pass (5-10 batches) pays for at least one checkpoint.
CHECKPOINT_EVERY = 5
RATIO_TARGET = 0.7
RECOVERY_TARGET_S = 10.0
# The recovery run: steady input well under capacity, one checkpoint every 5 batches.
STEADY_LINES_PER_SECOND = 2_000
RECOVERY_CHECKPOINT_EVERY = 5
PRELOADED = "standby: pre-loaded the checkpoint"
PRELOAD_REUSED = "state taken from the pre-loaded checkpoint"
QUERY_PAUSE_S = 0.05
"""The query load's pause between an answer and the next query."""
STATE_KEYS_METRIC = re.compile(r"^dstreams_state_keys\{[^}]*\}\s+(\S+)$", re.MULTILINE)


def add_to_total(counts: list[int], total: int | None) -> int:
    return (total or 0) + sum(counts)


# --- input ---------------------------------------------------------------------------------------


def vocabulary(keys: int) -> list[str]:
    return [f"k{i:07d}" for i in range(keys)]


def preload(bootstrap: str, topic: str, lines: int, words: list[str], seed: int) -> None:
    """`lines` lines of 8 words drawn uniformly from `words`, round-robin over the partitions."""
    from confluent_kafka import Producer

    rng = random.Random(seed)  # noqa: S311 - benchmark data
    producer = Producer(
        {"bootstrap.servers": bootstrap, "linger.ms": 50, "batch.num.messages": 10000}
    )
    for i in range(lines):
        line = " ".join(rng.choices(words, k=WORDS_PER_LINE))
        produce(producer, topic, line.encode(), i % PARTITIONS)
    if producer.flush(120) != 0:
        msg = f"could not preload {topic}"
        raise RuntimeError(msg)


def preload_every_word(bootstrap: str, topic: str, words: list[str]) -> None:
    """Each word once, 8 to a line: after these lines the state holds every word."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 50})
    for i in range(0, len(words), WORDS_PER_LINE):
        line = " ".join(words[i : i + WORDS_PER_LINE])
        produce(producer, topic, line.encode(), (i // WORDS_PER_LINE) % PARTITIONS)
    if producer.flush(120) != 0:
        msg = f"could not preload {topic}"
        raise RuntimeError(msg)


def produce(producer: Any, topic: str, value: bytes, partition: int) -> None:
    while True:
        try:
            producer.produce(topic, value, partition=partition)
            return
        except BufferError:
            producer.poll(0.05)


def expected_totals(bootstrap: str, topic: str, lines: int) -> Counter[str]:
    """Word totals of the topic, read with a plain consumer."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "state-bench", "enable.auto.commit": False}
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    counts: Counter[str] = Counter()
    seen = 0
    while seen < lines:
        for message in consumer.consume(10_000, 1.0):
            if message.error() is None:
                counts.update(message.value().decode().lower().split())
                seen += 1
    consumer.close()
    return counts


# --- in-process passes ---------------------------------------------------------------------------


@dataclass
class Pass:
    rate: float
    times: list[float]
    totals: Counter[str]
    checkpoints: list[tuple[float, int]] = field(default_factory=list)
    """(seconds, keys) of each checkpoint."""
    queries: QueryLoad | None = None


class CheckpointTimes:
    """Collects what `StateCheckpoints` reports of each checkpoint."""

    def __init__(self) -> None:
        self.seen: list[tuple[float, int]] = []

    def checkpoint_written(
        self, batch_time: int, seconds: float, size: int, streams: dict[str, dict[str, int]]
    ) -> None:
        self.seen.append((seconds, sum(s.get("keys", 0) for s in streams.values())))

    def state_recomputed(self, batches: int) -> None:
        """Nothing is recovered in the in-process passes."""


def word_count(counts: DStream) -> DStream:
    return counts


def running_word_count(counts: DStream) -> DStream:
    return counts.update_state_by_key(add_to_total).changes()


def queryable_word_count(counts: DStream) -> DStream:
    return counts.update_state_by_key(add_to_total).queryable("totals").changes()


class QueryLoad(threading.Thread):
    """Asks for one random word's total, `QUERY_PAUSE_S` after each answer, until stopped;
    keeps the seconds of each answered query (503s before the first completed batch are
    counted apart)."""

    def __init__(self, queries: QueryableStates, words: list[str]) -> None:
        super().__init__(name="query-load", daemon=True)
        self.queries = queries
        self.words = words
        self.stopping = threading.Event()
        self.seconds: list[float] = []
        self.unavailable = 0

    def run(self) -> None:
        rng = random.Random(5)  # noqa: S311 - benchmark data
        while not self.stopping.wait(QUERY_PAUSE_S):
            started = time.perf_counter()
            try:
                self.queries.lookup("totals", rng.choice(self.words))
            except QueryUnavailable:
                self.unavailable += 1
                continue
            self.seconds.append(time.perf_counter() - started)


def run_pass(
    sc: Any,
    bootstrap: str,
    topic: str,
    workdir: Path,
    batch_lines: int,
    running: bool,
    queried_words: list[str] | None = None,
) -> Pass:
    """Runs batches back to back until the topic is drained; steady records/s leave the first
    batch out (it starts Python workers and Kafka clients). With `queried_words`, a
    `QueryLoad` asks for their totals meanwhile."""
    build = running_word_count if running else word_count
    if queried_words is not None:
        build = queryable_word_count
    ctx = StreamingContext(sc, "bench-" + workdir.name, INTERVAL_MS, default_partitions=4)
    ctx.input_counters = sc.accumulator({}, CountersParam())
    lines = ctx.kafka_stream(
        "lines",
        {"bootstrap.servers": bootstrap, "group.id": "bench"},
        topics=[topic],
        starting_offsets=StartingOffsets.earliest(),
        max_rate_per_partition=batch_lines // PARTITIONS,
    ).values()
    sink = FileSink(workdir / "out")
    build(lines.map_partitions(count_words).reduce_by_key(add)).write("out", sink)
    journal = FileJournal(workdir / "journal")
    log = JournalLog(journal, journal.open(), ctx.graph_json())
    observed = CheckpointTimes()
    store = CheckpointStore(workdir / "checkpoints")
    checkpoints = StateCheckpoints(ctx, store, log, CHECKPOINT_EVERY, observed)
    lifecycle = BatchLifecycle(ctx, log, checkpoints=checkpoints)
    lifecycle.setup_outputs()
    load = None
    if queried_words is not None:
        ctx.queries.open()
        load = QueryLoad(ctx.queries, queried_words)
        load.start()
    times, records, ends = run_until_drained(lifecycle)
    if load is not None:
        load.stopping.set()
        load.join()
    ctx.close()
    journal.close()
    rate = steady_rate(records, ends)
    return Pass(rate, times, written_totals(sink, running), observed.seen, load)


def written_totals(sink: FileSink, running: bool) -> Counter[str]:
    """Word totals: the per-batch counts summed (word count), or each word's latest total (the
    running word count writes a word's total whenever it changes)."""
    counts: Counter[str] = Counter()
    for t in sink.committed_batches("out"):
        for word, n in sink.read_batch("out", t):
            counts[word] = n if running else counts[word] + n
    return counts


def throughput(args: argparse.Namespace, bootstrap: str, tmp: Path) -> tuple[bool, list[float]]:
    from service.dev.brokers import create_topic
    from service.driver.spark import create_spark_context

    words = vocabulary(args.keys)
    topic, warm_topic = f"state-bench-{int(time.time())}", f"state-bench-warm-{int(time.time())}"
    for name, lines, seed in ((topic, args.lines, 1), (warm_topic, WARM_UP_LINES, 2)):
        create_topic(bootstrap, name, partitions=PARTITIONS)
        print(f"preloading {lines:,} lines into {name} ...", flush=True)
        preload(bootstrap, name, lines, words, seed)
    expected = expected_totals(bootstrap, topic, args.lines)
    print(f"distinct words in the input: {len(expected):,}")
    sc = create_spark_context("dstreams-state-bench", "local[2]")
    run_pass(sc, bootstrap, warm_topic, tmp / "warm-up", args.batch_sizes[0], running=False)
    exact = True
    per_million: list[float] = []
    for n in args.batch_sizes:
        stateless = run_pass(sc, bootstrap, topic, tmp / f"w{n}", n, running=False)
        stateful = run_pass(sc, bootstrap, topic, tmp / f"s{n}", n, running=True)
        report_pass(n, stateless, stateful)
        same = stateless.totals == expected and stateful.totals == expected
        print(f"totals of both equal the input's: {same}", flush=True)
        exact = exact and same
        per_million += [s / (k / 1e6) for s, k in stateful.checkpoints if k]
        if not args.skip_queries and n == args.batch_sizes[0]:
            queried = run_pass(sc, bootstrap, topic, tmp / f"q{n}", n, True, words)
            report_queries(n, stateful, queried)
            exact = exact and queried.totals == expected
    sc.stop()
    return exact, per_million


def report_queries(batch_lines: int, plain: Pass, queried: Pass) -> None:
    load = queried.queries
    assert load is not None  # noqa: S101 - a queried pass has its load
    print(f"-- live state queries during batches of up to {batch_lines:,} lines")
    if not load.seconds:
        print(f"no query was answered ({load.unavailable} before the first completed batch)")
        return
    ordered = sorted(load.seconds)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    print(
        f"query of one key, {QUERY_PAUSE_S * 1000:.0f} ms after each answer, while batches run: "
        f"p50 {statistics.median(ordered) * 1000:.0f} ms, p99 {p99 * 1000:.0f} ms, "
        f"max {ordered[-1] * 1000:.0f} ms ({len(ordered)} answered, "
        f"{load.unavailable} before the first completed batch)"
    )
    print(
        f"running word count with queries: {queried.rate:,.0f} records/s "
        f"(without: {plain.rate:,.0f})"
    )


def report_pass(batch_lines: int, stateless: Pass, stateful: Pass) -> None:
    ratio = stateful.rate / stateless.rate
    verdict = "meets" if ratio >= RATIO_TARGET else "misses"
    print(f"-- batches of up to {batch_lines:,} lines ({len(stateful.times)} batches)")
    print(f"word count (stateless):               {stateless.rate:>10,.0f} records/s")
    print(f"running word count (update_state_by_key): {stateful.rate:>10,.0f} records/s")
    print(f"ratio running / stateless: {ratio:.2f} ({verdict} the {RATIO_TARGET} target)")
    for name, figures in (("stateless", stateless), ("running", stateful)):
        steady = figures.times[1:] or figures.times
        print(
            f"{name} processing per batch: p50 {statistics.median(steady):.2f}s, "
            f"max {max(steady):.2f}s"
        )
    for seconds, keys in stateful.checkpoints:
        print(f"checkpoint of {keys:,} keys: {seconds:.2f}s")


# --- recovery with a million keys ----------------------------------------------------------------


def recovery(args: argparse.Namespace, bootstrap: str, tmp: Path, mode: str) -> list[float]:
    """SIGKILL-to-next-completed-batch seconds of each kill, with `args.recovery_keys` of state:
    `cold` restarts the killed driver; `warm` has a `--standby` driver take over."""
    from recovery_bench import SteadyStream

    from service.dev.brokers import create_topic

    app = f"state_bench_{mode}_{int(time.time())}"
    topic = f"{app}.lines"
    create_topic(bootstrap, topic, partitions=PARTITIONS)
    words = vocabulary(args.recovery_keys)
    print(f"{mode}: preloading every one of {len(words):,} words into {topic} ...", flush=True)
    preload_every_word(bootstrap, topic, words)
    config = recovery_config(app, bootstrap, tmp)
    # Steady lines of recovery_bench's small vocabulary: the state keeps its million keys and
    # each batch updates a few hundred of them.
    stream = SteadyStream(bootstrap, topic, seed=3)
    stream.start()
    try:
        kills = recover_cold if mode == "cold" else recover_warm
        return kills(args, config, tmp)
    finally:
        stream.stopping.set()
        stream.join(30)


def recover_cold(args: argparse.Namespace, config: dict[str, Any], tmp: Path) -> list[float]:
    from recovery_bench import measure_restart, print_row, this_start

    from service.dev.service_process import ServiceProcess

    driver = ServiceProcess(config, tmp, name="driver")
    seconds: list[float] = []
    try:
        driver.start()
        wait_for_state(driver, args.recovery_keys)
        for kill in range(1, args.kills + 1):
            time.sleep(random.uniform(3.0, 6.0))  # noqa: S311 - benchmark timing
            result = measure_restart(driver, kill)
            print(f"cold ({load_average()}, {recomputed(this_start(driver))}) ", end="")
            print_row(result)
            seconds.append(result.next_completed_s)
            wait_for_state(driver, args.recovery_keys)
    finally:
        driver.kill()
        keep_log(args, "cold", [driver])
    return seconds


def recover_warm(args: argparse.Namespace, config: dict[str, Any], tmp: Path) -> list[float]:
    """Two `--standby` drivers on the file journal; the killed one comes back as the standby.
    Each kill waits until the standby has pre-loaded a checkpoint (warm state)."""
    from recovery_bench import measure_takeover, print_row, this_start, wait_until_standing_by

    from service.dev.service_process import ServiceProcess

    config = {**config, "standby": {"enabled": True}}
    active = ServiceProcess(config, tmp, name="driver-a")
    standby = ServiceProcess(config, tmp, name="driver-b")
    seconds: list[float] = []
    try:
        active.start()
        wait_for_state(active, args.recovery_keys)
        standby.start()
        for kill in range(1, args.kills + 1):
            wait_until_standing_by(standby)
            wait_for_log(standby, PRELOADED, this_start)
            time.sleep(random.uniform(3.0, 6.0))  # noqa: S311 - benchmark timing
            result = measure_takeover(active, standby, kill)
            log = this_start(standby)
            reused = f"pre-loaded reused: {PRELOAD_REUSED in log}"
            print(f"warm ({load_average()}, {recomputed(log)}, {reused}) ", end="")
            print_row(result)
            seconds.append(result.next_completed_s)
            active, standby = standby, active
            wait_for_state(active, args.recovery_keys)
            standby.start()
    finally:
        active.kill()
        standby.kill()
        keep_log(args, "warm", [active, standby])
    return seconds


def wait_for_log(driver: Any, text: str, this_start: Any, timeout_s: float = 600.0) -> None:
    """Until `text` appears in the log of the driver's latest start."""
    deadline = time.monotonic() + timeout_s
    while text not in this_start(driver):
        if time.monotonic() > deadline or not driver.running():
            msg = f"{text!r} not logged within {timeout_s:.0f}s\n{driver.log_tail()}"
            raise RuntimeError(msg)
        time.sleep(0.2)


def recomputed(log: str) -> str:
    """How many completed batches after the checkpoint the recovery recomputed (each steps
    every key of the state once more in the first batch's job)."""
    found = re.search(r"(\d+) completed batches recomputed", log)
    return f"{found.group(1) if found else '?'} batches recomputed"


def load_average() -> str:
    one, five, _ = os.getloadavg()
    return f"load {one:.1f}/{five:.1f}"


def keep_log(args: argparse.Namespace, mode: str, drivers: list[Any]) -> None:
    if args.keep_log is not None:
        path = args.keep_log.with_name(f"{args.keep_log.stem}-{mode}{args.keep_log.suffix}")
        path.write_bytes(b"".join(d.log_path.read_bytes() for d in drivers))


def recovery_config(app: str, bootstrap: str, workdir: Path) -> dict[str, Any]:
    return {
        "app_id": app,
        "job": "examples.running_totals:build",
        "batch_interval_ms": INTERVAL_MS,
        "default_partitions": 4,
        "spark": {"master": "local[2,4]"},
        "kafka": {"bootstrap_servers": bootstrap, "require_replication": False},
        "sources": {
            "lines": {
                "topics": [f"{app}.lines"],
                "starting_offsets": "earliest",
                "codec": "utf-8",
                "max_rate_per_partition": 50_000,
            }
        },
        "sinks": {"totals": {"type": "files", "path": str(workdir / "files")}},
        "journal": {"type": "file", "path": str(workdir / "state" / "journal")},
        "checkpoint": {
            "path": str(workdir / "state" / "checkpoints"),
            "interval_batches": RECOVERY_CHECKPOINT_EVERY,
        },
        "logging": {"format": "json", "level": "INFO"},
    }


def wait_for_state(driver: Any, keys: int, timeout_s: float = 600.0) -> None:
    """Until a checkpoint of this driver process holds `keys` keys."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        body = driver.get("/metrics")
        found = [float(v) for v in STATE_KEYS_METRIC.findall(body.decode())] if body else []
        if found and sum(found) >= keys:
            return
        if not driver.running():
            raise RuntimeError("the driver stopped\n" + driver.log_tail())
        time.sleep(0.5)
    msg = f"no checkpoint of {keys:,} keys within {timeout_s:.0f}s\n{driver.log_tail()}"
    raise RuntimeError(msg)


# --- main ----------------------------------------------------------------------------------------


def main() -> int:
    # Under the workers' hash seed, as `dstreams run` is: queries place keys in the driver.
    restart_with_hash_seed()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=1_000_000)
    parser.add_argument("--keys", type=int, default=200_000, help="vocabulary of the throughput")
    parser.add_argument("--batch-lines", default=",".join(str(n) for n in BATCH_LINES))
    parser.add_argument("--recovery-keys", type=int, default=1_000_000)
    parser.add_argument("--kills", type=int, default=3)
    parser.add_argument("--skip-recovery", action="store_true")
    parser.add_argument(
        "--recovery", default="cold,warm", help="cold, warm (a --standby takes over) or both"
    )
    parser.add_argument("--skip-throughput", action="store_true")
    parser.add_argument("--skip-queries", action="store_true", help="no live query pass")
    parser.add_argument("--keep-log", type=Path, default=None, help="copy the driver's log here")
    args = parser.parse_args()
    args.batch_sizes = [int(n) for n in args.batch_lines.split(",")]

    from service.dev.brokers import kafka_endpoint

    with kafka_endpoint(brokers=1) as bootstrap, tempfile.TemporaryDirectory() as tmp:
        exact, per_million = True, []
        if not args.skip_throughput:
            exact, per_million = throughput(args, bootstrap, Path(tmp) / "throughput")
        if per_million:
            print(
                f"checkpoint seconds per million keys: median {statistics.median(per_million):.2f}"
                f" (of {len(per_million)} checkpoints)"
            )
        medians = {}
        for mode in [] if args.skip_recovery else args.recovery.split(","):
            kills = recovery(args, bootstrap, Path(tmp) / f"recovery-{mode}", mode)
            medians[mode] = statistics.median(kills)
        for mode, median in medians.items():
            verdict = "meets" if median <= RECOVERY_TARGET_S else "misses"
            print(
                f"median SIGKILL -> next completed batch, {mode}, with {args.recovery_keys:,} "
                f"keys of state: {median:.1f}s ({verdict} the {RECOVERY_TARGET_S:.0f}s target; "
                f"{load_average()})"
            )
    return 0 if exact else 1


if __name__ == "__main__":
    sys.exit(main())
