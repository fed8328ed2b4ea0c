"""A keyed state on disk (`update_state_on_disk`) with ten million keys: load, batches that touch
1% of the keys, checkpoint cost, recovery, live queries and memory.

`examples.running_totals_on_disk` runs as a `dstreams run` subprocess (files sink, file journal,
`local[2,4]`, its SQLite stores under the bench's temporary folder) on a local broker:

1. **Load.** `<app>.lines` holds every word of a `--keys` vocabulary (default 10,000,000 words,
   `w0000000` ...) exactly once, 8 distinct words to a line, produced with confluent-kafka
   (`produce_batch`, lz4, acks=all, idempotent). The driver consumes it in large batches until a
   checkpoint counts every key in the local stores (`dstreams_state_keys`). Printed: produce
   seconds, and the load's seconds and records/s.
2. **Touching 1% per batch.** The driver is stopped (SIGTERM) and started again with a rate limit
   of `keys / 100` words per 1 s batch; a producer appends lines of words drawn uniformly from
   the vocabulary, staying two batches ahead of the driver, so every batch touches 1% of the
   keys. Printed over `--touch-batches` batches after the first (it starts the Python workers):
   records per second of processing (the capacity; batches run back to back once behind),
   records/s of wall clock, and per-batch processing seconds. Baseline, in the same run: the
   same lines (copied to a topic of their own) through the stateless `examples.wordcount` with
   the same settings; both, and their ratio.
3. **Checkpoint seconds** of those batches (the driver's "checkpoint of batch ..." log lines):
   median and max, target <= 1 s; beside them the durable bytes each batch published under
   `<checkpoint path>/disk-state/` (its `changes` files, and the snapshots taken meanwhile)
   against the whole local store on disk: the cost follows the changed keys, not the state.
4. **SIGKILL to next completed batch** with every key in state, `--kills` times, while a trickle
   of lines streams in: each kill's figures (recovery_bench's way back) and the median, target
   <= 30 s.
5. **Live query latency under load.** During phase 2 a thread asks `GET /state/totals/<word>`
   of a random word on the driver's HTTP port, 50 ms after each answer: p50, p99 and max of the
   answered queries (target p99 <= 50 ms); 503s counted apart.
6. **Memory.** The summed RSS of the driver's process tree (driver, JVM, Python workers),
   sampled every 0.5 s for the whole run: its peak per phase, the JVM's heap setting, and the
   local stores' size on disk.
7. **Exactness.** With the input drained, ~1,000 words (half of them touched) are looked up over
   HTTP, and after a clean stop (SIGTERM) read from the files sink, against the true totals (1
   from the load plus what phase 2 and the trickle added). `exact: True/False`; exit code 1 when
   not.

Not a test: it prints figures and asserts only exactness.
Usage: python bench/disk_state_bench.py [--keys N] [--touch-batches N] [--kills N]
    [--partitions N] [--keep-log FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import statistics
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from recovery_bench import measure_restart, print_row, this_start  # noqa: E402
from state_bench import load_average, recomputed, recovery_config, wait_for_state  # noqa: E402

from service.dev.service_process import ServiceProcess  # noqa: E402

TOPIC_PARTITIONS = 4
STATE_PARTITIONS = 8
"""The job's `default_partitions`, hence its stores. At 1,000,000 keys on 2 cores 4 and 8 were
within noise of each other (load 10,800 against 10,200 lines/s, 1% batches 0.74 against 0.71 s);
8 halves each partition's store, hence the size of each snapshot and of each rebuild."""
WORDS_PER_LINE = 8
INTERVAL_MS = 1000
LOAD_BATCH_LINES = 100_000
"""Lines per batch while loading (800,000 new keys)."""
TOUCH_SHARE = 0.01
AHEAD_BATCHES = 2
"""How many batches of input the phase-2 producer keeps ahead of the driver."""
CHECKPOINT_EVERY = 5
SNAPSHOT_EVERY = 20
"""The example job's `snapshot_every_batches` (the operator's default)."""
TRICKLE_SHARE = 0.1
"""The trickle during the kills, as a share of a batch's limit per second: well under what the
driver can do, so it catches up soon after each restart."""
QUERY_PAUSE_S = 0.05
SAMPLE_WORDS = 1000
RSS_EVERY_S = 0.5
PRODUCE_CHUNK = 10_000
CHECKPOINT_TARGET_S = 1.0
RECOVERY_TARGET_S = 30.0
QUERY_P99_TARGET_S = 0.05
LOAD_TIMEOUT_S = 3600.0
DRAIN_TIMEOUT_S = 600.0
BATCH_LINE = re.compile(
    r"^batch (\d+) (completed|replayed): (\d+) records in, .*, ([\d.]+)s \(outputs' jobs"
)
CHECKPOINT_LINE = re.compile(r"^checkpoint of batch (\d+): \d+ pieces, (\d+) bytes \(([\d.]+)s\)")
INPUT_METRIC = re.compile(r"^dstreams_input_records_total\{[^}]*\}\s+(\S+)$", re.MULTILINE)
SPARK_SUBMIT = "org.apache.spark.deploy.SparkSubmit"
LAUNCHER = "org.apache.spark.launcher.Main"
KEYS_METRIC = re.compile(r"^dstreams_state_keys\{[^}]*\}\s+(\S+)$", re.MULTILINE)


def word(i: int) -> str:
    return f"w{i:07d}"


# --- producing -----------------------------------------------------------------------------------


class Lines:
    """A producer of lines, round-robin over the topic's partitions; fails loudly on any
    delivery error (the expected totals assume every line arrived once)."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        from confluent_kafka import Producer

        self.producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "acks": "all",
                "enable.idempotence": True,
                "compression.type": "lz4",
                "linger.ms": 20,
                "batch.size": 1_000_000,
                "queue.buffering.max.messages": 1_000_000,
                "queue.buffering.max.kbytes": 1_048_576,
            }
        )
        self.topic = topic
        self.sent = 0
        self.errors: list[str] = []

    def send(self, lines: list[bytes]) -> None:
        for start in range(0, len(lines), PRODUCE_CHUNK):
            part = lines[start : start + PRODUCE_CHUNK]
            # produce_batch sends a whole call to one partition (librdkafka's batch API ignores
            # a message's own `partition`), so one call per partition.
            for partition in range(TOPIC_PARTITIONS):
                first = (partition - self.sent) % TOPIC_PARTITIONS
                messages = [{"value": line} for line in part[first::TOPIC_PARTITIONS]]
                self._queue(messages, partition)
            self.sent += len(part)

    def _queue(self, messages: list[dict[str, Any]], partition: int) -> None:
        """Queues a batch; what the full local queue refused is queued again after a poll."""
        while messages:
            queued = self.producer.produce_batch(
                self.topic, messages, partition=partition, on_delivery=self._report
            )
            if queued == len(messages):
                self.producer.poll(0)
                return
            refused = [m for m in messages if "_error" in m]
            for m in refused:
                del m["_error"]
            if len(refused) != len(messages) - queued:
                msg = f"produce_batch queued {queued} of {len(messages)}, refused {len(refused)}"
                raise RuntimeError(msg)
            messages = refused
            self.producer.poll(0.05)

    def _report(self, error: Any, _message: Any) -> None:
        if error is not None:
            self.errors.append(str(error))

    def flush(self) -> None:
        left = self.producer.flush(300)
        if left or self.errors:
            msg = f"{self.topic}: {left} lines undelivered, errors {self.errors[:3]}"
            raise RuntimeError(msg)


def load_lines(keys: int) -> Iterator[list[bytes]]:
    """Every word once, 8 to a line, in parts of `PRODUCE_CHUNK * 10` lines."""
    part = PRODUCE_CHUNK * 10 * WORDS_PER_LINE
    for start in range(0, keys, part):
        words = [word(i) for i in range(start, min(keys, start + part))]
        yield [
            " ".join(words[i : i + WORDS_PER_LINE]).encode()
            for i in range(0, len(words), WORDS_PER_LINE)
        ]


def touch_lines(keys: int, lines: int, rng: random.Random, counts: Counter[str]) -> list[bytes]:
    """`lines` lines of words drawn uniformly from the vocabulary, counted into `counts`."""
    words = [word(i) for i in rng.choices(range(keys), k=lines * WORDS_PER_LINE)]
    counts.update(words)
    return [
        " ".join(words[i : i + WORDS_PER_LINE]).encode()
        for i in range(0, len(words), WORDS_PER_LINE)
    ]


class Feeder(threading.Thread):
    """Appends the phase-2 chunks as fast as the driver drains them: chunk i goes out once the
    driver has read all but `AHEAD_BATCHES` chunks before it."""

    def __init__(self, lines: Lines, chunks: list[list[bytes]], driver: ServiceProcess) -> None:
        super().__init__(name="feeder", daemon=True)
        self.lines, self.chunks, self.driver = lines, chunks, driver
        self.failed: BaseException | None = None

    def run(self) -> None:
        try:
            for chunk in self.chunks:
                while self.lines.sent - input_records(self.driver) > AHEAD_BATCHES * len(chunk):
                    time.sleep(0.02)
                self.lines.send(chunk)
                self.lines.producer.flush(60)
            self.lines.flush()
        except BaseException as error:  # noqa: BLE001 - reported by the main thread
            self.failed = error


class Trickle(threading.Thread):
    """`per_second` lines/s of uniformly drawn words until stopped, counted as they go."""

    def __init__(self, lines: Lines, keys: int, per_second: int, counts: Counter[str]) -> None:
        super().__init__(name="trickle", daemon=True)
        self.lines, self.keys, self.per_second, self.counts = lines, keys, per_second, counts
        self.stopping = threading.Event()
        self.rng = random.Random(7)  # noqa: S311 - benchmark data
        self.failed: BaseException | None = None

    def run(self) -> None:
        started = time.monotonic()
        try:
            while not self.stopping.wait(0.1):
                # Paced by the clock, not by the loop: what the last round cost is made up.
                due = int((time.monotonic() - started) * self.per_second) - self.lines.sent
                if due > 0:
                    self.lines.send(touch_lines(self.keys, due, self.rng, self.counts))
            self.lines.flush()
        except BaseException as error:  # noqa: BLE001 - reported by the main thread
            self.failed = error


# --- reading the driver --------------------------------------------------------------------------


@dataclass
class Batch:
    batch_time: int
    kind: str
    records: int
    seconds: float
    ended: float
    """Wall clock (epoch seconds) of the log line that says it finished."""


@dataclass
class Checkpoint:
    batch_time: int
    size: int
    seconds: float


def log_messages(text: str) -> Iterator[tuple[float, str]]:
    """(epoch seconds, message) of the driver's JSON log lines."""
    for line in text.splitlines():
        if not line.startswith("{"):
            continue
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        message, stamp = entry.get("message"), entry.get("timestamp")
        if isinstance(message, str) and isinstance(stamp, str):
            yield datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp(), message


def batches_logged(text: str) -> list[Batch]:
    found = []
    for ended, message in log_messages(text):
        if (m := BATCH_LINE.match(message)) is not None:
            t, kind, records, seconds = m.groups()
            found.append(Batch(int(t), kind, int(records), float(seconds), ended))
    return found


def checkpoints_logged(text: str) -> list[Checkpoint]:
    found = []
    for _, message in log_messages(text):
        if (m := CHECKPOINT_LINE.match(message)) is not None:
            found.append(Checkpoint(int(m.group(1)), int(m.group(2)), float(m.group(3))))
    return found


def metric_sum(driver: ServiceProcess, pattern: re.Pattern[str]) -> float | None:
    body = driver.get("/metrics")
    if body is None:
        return None
    return sum(float(v) for v in pattern.findall(body.decode()))


def input_records(driver: ServiceProcess) -> int:
    """Records the driver's current process has read (0 while it cannot say)."""
    return int(metric_sum(driver, INPUT_METRIC) or 0)


def wait_drained(bootstrap: str, group: str, topic: str, timeout_s: float) -> None:
    """Until the driver's consumer group has committed the topic's end on every partition: the
    driver commits after a batch completes, so the last completed batch read everything."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False}
    )
    try:
        deadline = time.monotonic() + timeout_s
        partitions = [TopicPartition(topic, p) for p in range(TOPIC_PARTITIONS)]
        while time.monotonic() < deadline:
            ends = [consumer.get_watermark_offsets(tp, timeout=10)[1] for tp in partitions]
            committed = [tp.offset for tp in consumer.committed(partitions, timeout=10)]
            if committed == ends:
                return
            time.sleep(0.5)
    finally:
        consumer.close()
    msg = f"{group} did not read {topic} to its end within {timeout_s:.0f}s"
    raise RuntimeError(msg)


@dataclass
class Rates:
    wall: float
    """Records/s from the end of the first batch to the end of the last: batches start every
    interval unless behind, so below capacity this is the input's rate."""
    busy: float
    """Records per second of processing: the capacity when batches run back to back."""
    seconds: list[float]
    """Processing seconds per batch."""


def steady(batches: list[Batch]) -> Rates:
    """The figures of the batches after the first (which starts the Python workers); of a lone
    batch, its own."""
    rest = batches[1:] or batches
    records = sum(b.records for b in rest)
    seconds = [b.seconds for b in rest]
    span = batches[-1].ended - batches[0].ended
    wall = records / span if len(batches) > 1 else records / seconds[0]
    return Rates(wall, records / sum(seconds), seconds)


def describe(rates: Rates) -> str:
    return (
        f"{rates.busy:>9,.0f} records per second of processing ({rates.wall:,.0f} records/s of "
        f"wall clock); per batch p50 {statistics.median(rates.seconds):.2f}s max "
        f"{max(rates.seconds):.2f}s"
    )


# --- the driver's process tree -------------------------------------------------------------------


def process_tree(root: int) -> list[int]:
    """`root` and all its descendants, from /proc."""
    children: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(entry.path, "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry.name))
    tree, todo = [], [root]
    while todo:
        pid = todo.pop()
        tree.append(pid)
        todo += children.get(pid, [])
    return tree


def rss_bytes(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def jvm_heap(root: int) -> str | None:
    """The -Xmx of Spark's JVM in `root`'s tree, as its command line says (spark-class first
    runs a short-lived launcher JVM with a heap of its own: not that one)."""
    for pid in process_tree(root):
        try:
            args = Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")
        except OSError:
            continue
        if args and args[0].endswith("java") and LAUNCHER not in args and SPARK_SUBMIT in args:
            heap = [a for a in args if a.startswith("-Xmx")]
            return heap[-1] if heap else "no -Xmx (the JVM's default)"
    return None


class MemorySampler(threading.Thread):
    """Every `RSS_EVERY_S`, the summed RSS of the watched driver's process tree; the peak per
    phase. (Forked Python workers share pages, so the sum overstates a little.)"""

    def __init__(self) -> None:
        super().__init__(name="rss", daemon=True)
        self.driver: ServiceProcess | None = None
        self.phase = "start"
        self.peaks: dict[str, int] = {}
        self.heap = "?"
        self.stopping = threading.Event()

    def run(self) -> None:
        while not self.stopping.wait(RSS_EVERY_S):
            driver = self.driver
            if driver is None or not driver.running():
                continue
            tree = process_tree(driver.pid)
            total = sum(rss_bytes(pid) for pid in tree)
            self.peaks[self.phase] = max(self.peaks.get(self.phase, 0), total)
            if self.heap == "?":
                self.heap = jvm_heap(driver.pid) or "?"


def disk_usage(path: Path) -> int:
    """Bytes allocated on disk under `path`, as `du` counts them."""
    total = 0
    for folder, _, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(folder, name)).st_blocks * 512
            except OSError:
                pass
    return total


def mib(size: float) -> str:
    if size < 2**20:
        return f"{size / 2**10:,.1f} KiB"
    return f"{size / 2**20:,.1f} MiB"


# --- live queries --------------------------------------------------------------------------------


def lookup(port: int, key: str, timeout_s: float = 5.0) -> tuple[int, Any]:
    """(HTTP status, the answer's value) of `GET /state/totals/<key>`."""
    url = f"http://127.0.0.1:{port}/state/totals/{urllib.parse.quote(key, safe='')}"
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as reply:  # noqa: S310 - loopback
            return reply.status, json.loads(reply.read()).get("value")
    except urllib.error.HTTPError as error:
        return error.code, None


class QueryLoad(threading.Thread):
    """A random word's total, `QUERY_PAUSE_S` after each answer, until stopped."""

    def __init__(self, port: int, keys: int) -> None:
        super().__init__(name="query-load", daemon=True)
        self.port, self.keys = port, keys
        self.stopping = threading.Event()
        self.seconds: list[float] = []
        self.statuses: Counter[int] = Counter()

    def run(self) -> None:
        rng = random.Random(5)  # noqa: S311 - benchmark data
        while not self.stopping.wait(QUERY_PAUSE_S):
            started = time.perf_counter()
            try:
                status, _ = lookup(self.port, word(rng.randrange(self.keys)))
            except OSError:
                self.statuses[0] += 1
                continue
            self.statuses[status] += 1
            if status == 200:
                self.seconds.append(time.perf_counter() - started)


# --- the run -------------------------------------------------------------------------------------


@dataclass
class Run:
    args: argparse.Namespace
    bootstrap: str
    tmp: Path
    app: str
    touch_lines: int
    """Lines per phase-2 batch: 1% of the keys."""
    expected: Counter[str] = field(default_factory=Counter)
    """What phase 2 and the trickle added to each word's 1."""
    memory: MemorySampler = field(default_factory=MemorySampler)

    @property
    def topic(self) -> str:
        return f"{self.app}.lines"

    @property
    def local_dir(self) -> Path:
        return self.tmp / "state" / "local"

    @property
    def checkpoint_dir(self) -> Path:
        return self.tmp / "state" / "checkpoints"

    def config(self, rate_per_partition: float) -> dict[str, Any]:
        config = recovery_config(self.app, self.bootstrap, self.tmp)
        config["job"] = "examples.running_totals_on_disk:build"
        config["default_partitions"] = self.args.partitions
        config["sources"]["lines"]["max_rate_per_partition"] = rate_per_partition
        config["checkpoint"].update(
            interval_batches=CHECKPOINT_EVERY, local_state_dir=str(self.local_dir)
        )
        return config


def produce_all(run: Run) -> list[list[bytes]]:
    """The load into `<app>.lines`, and phase 2's chunks (one more than measured: the first
    batch after the restart warms up) copied into `<app>.baseline` for the stateless pass."""
    from service.dev.brokers import create_topic

    for topic in (run.topic, f"{run.app}.baseline"):
        create_topic(run.bootstrap, topic, partitions=TOPIC_PARTITIONS)
    started = time.perf_counter()
    lines = Lines(run.bootstrap, run.topic)
    for part in load_lines(run.args.keys):
        lines.send(part)
    lines.flush()
    seconds = time.perf_counter() - started
    print(
        f"load: produced {lines.sent:,} lines ({run.args.keys:,} words, each once) in "
        f"{seconds:.1f}s ({lines.sent / seconds:,.0f} lines/s; produce_batch, lz4, acks=all)",
        flush=True,
    )
    rng = random.Random(3)  # noqa: S311 - benchmark data
    chunks = [
        touch_lines(run.args.keys, run.touch_lines, rng, run.expected)
        for _ in range(run.args.touch_batches + 1)
    ]
    baseline = Lines(run.bootstrap, f"{run.app}.baseline")
    for chunk in chunks:
        baseline.send(chunk)
    baseline.flush()
    return chunks


def load(run: Run, driver: ServiceProcess) -> None:
    run.memory.phase = "load"
    started = time.monotonic()
    driver.start()
    wait_for_state(driver, run.args.keys, LOAD_TIMEOUT_S)
    seconds = time.monotonic() - started
    with_input = [b for b in batches_logged(this_start(driver)) if b.records]
    lines = sum(b.records for b in with_input)
    print(
        f"load: driver start -> a checkpoint counting all {run.args.keys:,} keys: {seconds:.1f}s "
        f"({lines / seconds:,.0f} lines/s, {run.args.keys / seconds:,.0f} keys/s overall)",
        flush=True,
    )
    print(
        f"load batches: {len(with_input)} of up to {LOAD_BATCH_LINES:,} lines; after the first: "
        f"{describe(steady(with_input))}; local stores {mib(disk_usage(run.local_dir))} on disk",
        flush=True,
    )


def restart_for_touching(run: Run, driver: ServiceProcess) -> None:
    """A clean stop, and a start with the 1%-per-batch rate limit."""
    run.memory.phase = "restart"
    started = time.monotonic()
    code = driver.terminate()
    stopped = time.monotonic() - started
    driver.config["sources"]["lines"]["max_rate_per_partition"] = run.touch_lines / TOPIC_PARTITIONS
    driver.start()
    driver.wait_for(lambda s: "completed" in batch_outcomes(s), 300, "a completed batch")
    print(
        f"clean restart with {run.args.keys:,} keys: SIGTERM -> exit {code} in {stopped:.1f}s, "
        f"start -> next completed batch {time.monotonic() - started - stopped:.1f}s",
        flush=True,
    )


def batch_outcomes(status: dict[str, Any]) -> list[str]:
    return [str(b.get("outcome")) for b in status.get("batches", [])]


def touch(run: Run, driver: ServiceProcess, chunks: list[list[bytes]]) -> tuple[Rates, QueryLoad]:
    """Phase 2, with the query load; returns its records/s and the queries."""
    run.memory.phase = "touch"
    log_before = len(this_start(driver))
    queries = QueryLoad(driver.port, run.args.keys)
    feeder = Feeder(Lines(run.bootstrap, run.topic), chunks, driver)
    queries.start()
    feeder.start()
    feeder.join()
    if feeder.failed is not None:
        raise feeder.failed
    wait_drained(run.bootstrap, run.app, run.topic, DRAIN_TIMEOUT_S)
    queries.stopping.set()
    queries.join()
    text = this_start(driver)[log_before:]
    measured = [b for b in batches_logged(text) if b.records][: run.args.touch_batches + 1]
    rates = steady(measured)
    words = sum(b.records for b in measured[1:]) * WORDS_PER_LINE
    print(
        f"-- touching 1% per batch: {len(measured) - 1} batches after the first of up to "
        f"{run.touch_lines:,} lines ({run.touch_lines * WORDS_PER_LINE:,} words), "
        f"{words:,} words in all",
        flush=True,
    )
    print(f"running totals on disk:      {describe(rates)}; {load_average()}", flush=True)
    report_checkpoints(run, measured, checkpoints_logged(text))
    return rates, queries


def report_checkpoints(run: Run, batches: list[Batch], checkpoints: list[Checkpoint]) -> None:
    first, last = batches[1].batch_time, batches[-1].batch_time
    seconds = [c.seconds for c in checkpoints if first <= c.batch_time <= last]
    if seconds:
        verdict = "meets" if max(seconds) <= CHECKPOINT_TARGET_S else "misses"
        print(
            f"checkpoints of those batches: {len(seconds)}, median "
            f"{statistics.median(seconds):.2f}s max {max(seconds):.2f}s ({verdict} the "
            f"{CHECKPOINT_TARGET_S:.0f}s target); "
            f"metadata written: {checkpoints[-1].size:,} bytes each",
            flush=True,
        )
    changes, snapshots = durable_files(run.checkpoint_dir, {b.batch_time for b in batches[1:]})
    # Each partition prunes what its latest snapshot covers: a batch counts once all its
    # partitions' changes are still there.
    per_batch = [sum(sizes) for sizes in changes.values() if len(sizes) == run.args.partitions]
    local = disk_usage(run.local_dir)
    if per_batch:
        print(
            f"durable changes per batch (all partitions): median "
            f"{mib(statistics.median(per_batch))}, max {mib(max(per_batch))} (of "
            f"{len(per_batch)} batches whose files are all still kept); local stores "
            f"{mib(local)} on disk: a batch's changes are "
            f"{statistics.median(per_batch) / local:.2%} of it",
            flush=True,
        )
    with_snapshot = [b.seconds for b in batches[1:] if b.batch_time in snapshots]
    without = [b.seconds for b in batches[1:] if b.batch_time not in snapshots]
    if with_snapshot and without:
        print(
            f"processing of the batches that published a snapshot: p50 "
            f"{statistics.median(with_snapshot):.2f}s ({len(with_snapshot)}); of the others: "
            f"p50 {statistics.median(without):.2f}s ({len(without)})",
            flush=True,
        )
    sizes = [size for per_batch_sizes in snapshots.values() for size in per_batch_sizes]
    if sizes:
        # Partitions take turns, each every SNAPSHOT_EVERY batches: in the long run a batch
        # publishes partitions / SNAPSHOT_EVERY snapshots.
        print(
            f"snapshots meanwhile: {len(sizes)} of one partition each, median "
            f"{mib(statistics.median(sizes))}; in the long run "
            f"{mib(statistics.median(sizes) * run.args.partitions / SNAPSHOT_EVERY)} per "
            f"batch ({run.args.partitions} partitions, each every {SNAPSHOT_EVERY} batches)",
            flush=True,
        )


def durable_files(
    root: Path, batch_times: set[int]
) -> tuple[dict[int, list[int]], dict[int, list[int]]]:
    """The sizes of the `changes` files and of the snapshots of the given batches, per batch
    (one per partition still kept), from `disk-state/<stream>/<lineage>/p*/<batch>/`."""
    changes: dict[int, list[int]] = {}
    snapshots: dict[int, list[int]] = {}
    for folder in (root / "disk-state").glob("*/*/p*/*"):
        if not folder.name.isdigit() or int(folder.name) not in batch_times:
            continue
        for file in folder.iterdir():
            kept = {"changes": changes, "snapshot": snapshots}.get(file.name)
            if kept is not None:
                kept.setdefault(int(folder.name), []).append(file.stat().st_size)
    return changes, snapshots


def report_queries(queries: QueryLoad) -> None:
    ordered = sorted(queries.seconds)
    others = {code: n for code, n in queries.statuses.items() if code not in (200, 503)}
    if not ordered:
        print(f"live queries: none answered ({dict(queries.statuses)})")
        return
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    verdict = "meets" if p99 <= QUERY_P99_TARGET_S else "misses"
    print(
        f"live query of one word, {QUERY_PAUSE_S * 1000:.0f} ms after each answer, during "
        f"phase 2: p50 {statistics.median(ordered) * 1000:.1f} ms, p99 {p99 * 1000:.1f} ms "
        f"({verdict} the {QUERY_P99_TARGET_S * 1000:.0f} ms target), max "
        f"{ordered[-1] * 1000:.1f} ms; {len(ordered)} answered, {queries.statuses[503]} "
        f"answered 503, other answers {others or 'none'}",
        flush=True,
    )


def kills(run: Run, driver: ServiceProcess) -> list[float]:
    """SIGKILL -> next completed batch, `--kills` times, with every key in state and a trickle
    of input."""
    run.memory.phase = "kills"
    per_second = max(1, int(run.touch_lines * TRICKLE_SHARE))
    trickle = Trickle(Lines(run.bootstrap, run.topic), run.args.keys, per_second, run.expected)
    trickle.start()
    print(
        f"-- {run.args.kills} SIGKILLs, a trickle of {per_second:,} lines/s meanwhile", flush=True
    )
    seconds: list[float] = []
    try:
        for kill in range(1, run.args.kills + 1):
            time.sleep(random.uniform(3.0, 6.0))  # noqa: S311 - benchmark timing
            result = measure_restart(driver, kill)
            print(f"cold ({load_average()}, {recomputed(this_start(driver))}) ", end="")
            print_row(result)
            seconds.append(result.next_completed_s)
            wait_for_state(driver, run.args.keys)
    finally:
        trickle.stopping.set()
        trickle.join(60)
    if trickle.failed is not None:
        raise trickle.failed
    return seconds


def check_exact(run: Run, driver: ServiceProcess) -> bool:
    """Looks ~1,000 words up over HTTP once the input is drained, stops the driver cleanly, and
    reads the same words' last totals from the files sink."""
    run.memory.phase = "exactness"
    wait_drained(run.bootstrap, run.app, run.topic, DRAIN_TIMEOUT_S)
    rng = random.Random(11)  # noqa: S311 - benchmark data
    touched = sorted(run.expected)
    sample = set(rng.sample(touched, min(SAMPLE_WORDS // 2, len(touched))))
    sample |= {word(i) for i in rng.sample(range(run.args.keys), SAMPLE_WORDS - len(sample))}
    truth = {w: 1 + run.expected[w] for w in sample}
    answered = {w: lookup_retrying(driver.port, w) for w in sorted(sample)}
    keys = metric_sum(driver, KEYS_METRIC)
    code = driver.terminate()
    written = files_totals(run.tmp / "files" / "totals", sample)
    wrong_http = sum(1 for w in sample if answered[w] != truth[w])
    wrong_files = sum(1 for w in sample if written.get(w) != truth[w])
    print(
        f"exactness: {len(sample):,} words ({len(sample & set(touched))} touched): {wrong_http} "
        f"wrong over HTTP, {wrong_files} wrong in the files sink; state keys {keys or 0:,.0f} "
        f"(expected {run.args.keys:,}); SIGTERM -> exit {code}",
        flush=True,
    )
    return wrong_http == 0 and wrong_files == 0 and keys == run.args.keys


def lookup_retrying(port: int, key: str) -> Any:
    """The key's total; a 503 (a store that cannot answer as of the last batch yet) or a
    connection error is asked again."""
    for _ in range(50):
        try:
            status, value = lookup(port, key)
        except OSError:
            status, value = 503, None
        if status != 503:
            return value if status == 200 else None
        time.sleep(0.1)
    return None


def files_totals(root: Path, words: set[str]) -> dict[str, int]:
    """Each of `words`' last total the files sink holds (each batch writes the totals it
    changed). Lines are `["w0000000",n]`: only the sampled words' lines are parsed, as ten
    million of them are read."""
    found: dict[str, int] = {}
    batches = sorted(root.glob("t=*"), key=lambda p: int(p.name[2:]))
    for batch in batches:
        if not (batch / "_SUCCESS").exists():
            continue
        for part in sorted(batch.glob("part-*.jsonl")):
            with part.open() as rows:
                for row in rows:
                    if row[2 : row.find('"', 2)] in words:
                        key, total = json.loads(row)
                        found[key] = total
    return found


def baseline(run: Run) -> Rates:
    """The phase-2 lines through the stateless word count, with the same limit and settings."""
    app = f"{run.app}_baseline"
    config = run.config(run.touch_lines / TOPIC_PARTITIONS)
    config.update(app_id=app, job="examples.wordcount:build")
    config["sources"]["lines"]["topics"] = [f"{run.app}.baseline"]
    config["sinks"] = {"counts": {"type": "files", "path": str(run.tmp / "baseline-files")}}
    config["journal"] = {"type": "file", "path": str(run.tmp / "baseline" / "journal")}
    del config["checkpoint"]
    driver = ServiceProcess(config, run.tmp / "baseline", name="baseline")
    run.memory.phase, run.memory.driver = "baseline", driver
    try:
        driver.start()
        wait_drained(run.bootstrap, app, f"{run.app}.baseline", DRAIN_TIMEOUT_S)
        rates = steady([b for b in batches_logged(this_start(driver)) if b.records])
        print(f"word count (stateless, same): {describe(rates)}; {load_average()}", flush=True)
        driver.terminate()
    finally:
        driver.kill()
        keep_log(run.args, "baseline", driver)
    return rates


def keep_log(args: argparse.Namespace, name: str, driver: ServiceProcess) -> None:
    if args.keep_log is not None:
        path = args.keep_log.with_name(f"{args.keep_log.stem}-{name}{args.keep_log.suffix}")
        path.write_bytes(driver.log_path.read_bytes())


def report_memory(run: Run) -> None:
    peaks = run.memory.peaks
    shown = ", ".join(f"{phase} {mib(size)}" for phase, size in peaks.items())
    disk_peak = max((v for k, v in peaks.items() if k != "baseline"), default=0)
    print(
        f"memory: peak summed RSS of the driver's process tree {mib(disk_peak)} (by phase: "
        f"{shown}); JVM heap {run.memory.heap}; local stores {mib(disk_usage(run.local_dir))} "
        f"on disk; durable disk-state {mib(disk_usage(run.checkpoint_dir / 'disk-state'))}",
        flush=True,
    )


def bench(run: Run) -> bool:
    chunks = produce_all(run)
    driver = ServiceProcess(run.config(LOAD_BATCH_LINES / TOPIC_PARTITIONS), run.tmp)
    run.memory.driver = driver
    run.memory.start()
    try:
        load(run, driver)
        restart_for_touching(run, driver)
        rates, queries = touch(run, driver, chunks)
        report_queries(queries)
        recoveries = kills(run, driver) if run.args.kills else []
        exact = check_exact(run, driver)
    finally:
        driver.kill()
        keep_log(run.args, "disk", driver)
    base = baseline(run)
    run.memory.stopping.set()
    print(
        f"ratio running totals on disk / stateless word count, per second of processing: "
        f"{rates.busy / base.busy:.2f} (of wall-clock records/s: {rates.wall / base.wall:.2f})"
    )
    if recoveries:
        median = statistics.median(recoveries)
        verdict = "meets" if median <= RECOVERY_TARGET_S else "misses"
        print(
            f"median SIGKILL -> next completed batch with {run.args.keys:,} keys on disk: "
            f"{median:.1f}s ({verdict} the {RECOVERY_TARGET_S:.0f}s target; {load_average()})"
        )
    report_memory(run)
    print(f"exact: {exact}", flush=True)
    return exact


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, default=10_000_000)
    parser.add_argument("--touch-batches", type=int, default=20, help="batches measured")
    parser.add_argument("--kills", type=int, default=3)
    parser.add_argument("--partitions", type=int, default=STATE_PARTITIONS, help="of the state")
    parser.add_argument("--keep-log", type=Path, default=None, help="copy the driver's log here")
    args = parser.parse_args()
    lines = round(args.keys * TOUCH_SHARE / WORDS_PER_LINE / TOPIC_PARTITIONS)
    from service.dev.brokers import kafka_endpoint

    # The stores and durable files of 10,000,000 keys take about 1 GiB of the temporary folder.
    with kafka_endpoint(brokers=1) as bootstrap, tempfile.TemporaryDirectory() as tmp:
        app = f"disk_state_bench_{int(time.time())}"
        run = Run(args, bootstrap, Path(tmp), app, max(1, lines) * TOPIC_PARTITIONS)
        exact = bench(run)
    return 0 if exact else 1


if __name__ == "__main__":
    sys.exit(main())
