"""Event-time count against the batch-time windowed count, and memory held per open window.

Both passes consume the same preloaded topic (lines `"<page> <event ms>"`, 4 partitions, event
times out of order by up to 400 ms and 5% of them 15-60 s behind) with the full batch lifecycle
(file journal, files sink, a checkpoint every 5 batches), batches back to back:

- **batch-time**: `reduce_by_key_and_window(add, subtract, length_ms=10 s, slide_ms=10 s)` on
  `(page, 1)`: clicks per page per 10 s of arrival;
- **event-time**: `count_by_key_and_event_window(length_ms=10 s, slack_ms=2 s,
  allowed_lateness_ms=10 s)`: clicks per page per 10 s of event time, late ones dropped.

Printed: records/s of each (all records over the whole pass, after a warm-up pass) and
their ratio; then the memory held per
open window, measured as the bytes Spark's block manager reports for the event window's latest
persisted state RDD (Python RDDs are cached as pickled bytes) divided by the records in it, and
the bytes per window of its checkpoint (JSON lines). Not a test: it prints figures and asserts
only that the event-time totals equal a plain-Python count of the input.
Usage: python bench/event_time_bench.py [--lines N] [--pages N] [--batch-lines N]
"""

from __future__ import annotations

import argparse
import operator
import pickle
import random
import statistics
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from connectors.planner import StartingOffsets  # noqa: E402
from examples.late_clicks import parse_click  # noqa: E402
from service.driver.checkpoints import StateCheckpoints  # noqa: E402
from service.driver.lifecycle import BatchLifecycle  # noqa: E402
from service.driver.recovery import JournalLog  # noqa: E402
from service.graph import functions  # noqa: E402
from service.graph.checkpoint_store import CheckpointStore  # noqa: E402
from service.graph.context import StreamingContext  # noqa: E402
from service.graph.counters import CountersParam  # noqa: E402
from service.graph.dstream import DStream, EventWindowView  # noqa: E402
from service.graph.state_functions import subtract  # noqa: E402
from service.journal.file import FileJournal  # noqa: E402
from sinks.files import FileSink  # noqa: E402

PARTITIONS = 4
INTERVAL_MS = 1000
WINDOW_MS = 10_000
SLACK_MS = 2_000
LATENESS_MS = 10_000
CHECKPOINT_EVERY = 5


def event_ms(value: int) -> int:
    return value


def click_lines(lines: int, pages: int, seed: int) -> list[bytes]:
    rng = random.Random(seed)  # noqa: S311 - benchmark data
    out = []
    for index in range(lines):
        event = 10_000_000 + index // 10 + rng.randint(-400, 400)
        if rng.random() < 0.05:
            event -= rng.randint(15_000, 60_000)
        out.append(f"p{rng.randrange(pages):06d} {event}".encode())
    return out


def preload(bootstrap: str, topic: str, values: list[bytes]) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 50})
    for i, value in enumerate(values):
        while True:
            try:
                producer.produce(topic, value, partition=i % PARTITIONS)
                break
            except BufferError:
                producer.poll(0.05)
    if producer.flush(120) != 0:
        msg = f"could not preload {topic}"
        raise RuntimeError(msg)


def batch_time_count(clicks: DStream) -> DStream:
    ones = clicks.map(operator.itemgetter(0)).map(functions.pair_with_one)
    return ones.reduce_by_key_and_window(
        functions.add, subtract, length_ms=WINDOW_MS, slide_ms=WINDOW_MS
    )


def event_time_count(clicks: DStream) -> EventWindowView:
    return clicks.count_by_key_and_event_window(
        event_time=event_ms, length_ms=WINDOW_MS, slack_ms=SLACK_MS, allowed_lateness_ms=LATENESS_MS
    )


@dataclass
class Pass:
    rate: float
    batches: int
    sink: FileSink
    stream: DStream


def run_pass(
    sc: Any, bootstrap: str, topic: str, workdir: Path, batch_lines: int, event: bool
) -> Pass:
    ctx = StreamingContext(sc, "bench-" + workdir.name, INTERVAL_MS, default_partitions=4)
    ctx.input_counters = sc.accumulator({}, CountersParam())
    clicks = (
        ctx.kafka_stream(
            "clicks",
            {"bootstrap.servers": bootstrap, "group.id": "bench"},
            topics=[topic],
            starting_offsets=StartingOffsets.earliest(),
            max_rate_per_partition=batch_lines // PARTITIONS,
        )
        .values()
        .map(parse_click)
    )
    stream = event_time_count(clicks) if event else batch_time_count(clicks)
    sink = FileSink(workdir / "out")
    stream.write("out", sink)
    journal = FileJournal(workdir / "journal")
    log = JournalLog(journal, journal.open(), ctx.graph_json())
    checkpoints = StateCheckpoints(
        ctx, CheckpointStore(workdir / "checkpoints"), log, CHECKPOINT_EVERY
    )
    lifecycle = BatchLifecycle(ctx, log, checkpoints=checkpoints)
    lifecycle.setup_outputs()
    started = time.perf_counter()
    records = run_until_drained(lifecycle)
    elapsed = time.perf_counter() - started
    ctx.close()
    journal.close()
    print(f"{workdir.name}: batches of {[n for n in records if n]}", flush=True)
    rate = sum(records) / elapsed
    return Pass(rate, sum(1 for n in records if n), sink, stream)


def run_until_drained(lifecycle: BatchLifecycle) -> list[int]:
    """Runs batches until the plans are empty and a 10 s boundary has passed since the last
    data: a batch-time window reads its batches only at its boundaries (where its output runs).
    Records are counted from the plans. Empty batches skip Spark in both passes alike."""
    records: list[int] = []
    batch_time = 1_000_000
    last_data = batch_time
    while batch_time <= last_data + WINDOW_MS:
        outcome = lifecycle.run_new(batch_time)
        planned = sum(r.count for r in outcome.plan.ranges)
        if planned:
            last_data = batch_time
        records.append(planned)
        batch_time += INTERVAL_MS
    return records


def memory_per_window(sc: Any, view: EventWindowView, workdir: Path) -> None:
    window = view.windowed.computation  # type: ignore[attr-defined]
    latest = window._states[-1][1]  # noqa: SLF001 - the bench looks inside on purpose
    rows = latest.collect()
    open_windows = sum(1 for _k, entry in rows if entry[0] == 3)
    infos = sc._jsc.sc().getRDDStorageInfo()  # noqa: SLF001 - Spark's storage report
    size = next((i.memSize() + i.diskSize() for i in infos if i.id() == latest.id()), 0)
    print(f"open windows held: {open_windows:,} ({len(rows):,} records in the state RDD)")
    if rows:
        print(f"Spark's storage report for the cached state: {size / len(rows):.0f} bytes/record")
        pickled = sum(len(pickle.dumps(rows[i : i + 1000])) for i in range(0, len(rows), 1000))
        print(f"pickled as Spark caches Python rows: {pickled / len(rows):.0f} bytes per window")
        slots = [window_slot(row) for row in rows[:2000] if row[1][0] == 3]
        merging = statistics.median(deep_size(slot) for slot in slots) + DICT_ENTRY_BYTES
        print(f"Python objects of a window while a batch merges: {merging:.0f} bytes")
    parts = sorted((workdir / "checkpoints").rglob("*event_window-windows/part-*.jsonl"))
    if parts:
        newest = parts[-1].parent
        body = sum(p.stat().st_size for p in newest.glob("part-*.jsonl"))
        count = sum(len(p.read_text().splitlines()) for p in newest.glob("part-*.jsonl"))
        print(f"checkpoint: {body / max(1, count):.0f} bytes per window record (JSON lines)")


# A CPython dict entry: hash, key and value pointers (24 bytes) at a typical 2/3 load.
DICT_ENTRY_BYTES = 36


def window_slot(row: Any) -> Any:
    """What the merge holds per window: a `(key, start)` dict key and a `[value, revision]`."""
    key, entry = row
    return ((key, entry[1]), [entry[2], entry[3]]) if entry[0] == 3 else ()


def deep_size(value: Any) -> int:
    size = sys.getsizeof(value)
    if isinstance(value, tuple | list):
        size += sum(deep_size(item) for item in value)
    return size


def event_totals(sink: FileSink) -> Counter[tuple[str, int]]:
    """The latest revision's count of every window the event-time pass emitted."""
    latest: dict[tuple[str, int], tuple[int, int]] = {}
    for t in sink.committed_batches("out"):
        for key, start, _end, value, revision in sink.read_batch("out", t):
            if (key, start) not in latest or latest[(key, start)][0] < revision:
                latest[(key, start)] = (revision, value)
    return Counter({k: v for k, (_r, v) in latest.items()})


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--lines", type=int, default=400_000)
    parser.add_argument("--pages", type=int, default=20_000)
    parser.add_argument("--batch-lines", type=int, default=50_000)
    args = parser.parse_args()
    from service.dev.brokers import create_topic, kafka_endpoint
    from service.driver.spark import create_spark_context

    with kafka_endpoint(brokers=1) as bootstrap, tempfile.TemporaryDirectory() as tmp:
        topic = f"event-bench-{int(time.time())}"
        create_topic(bootstrap, topic, partitions=PARTITIONS)
        print(f"preloading {args.lines:,} clicks over {args.pages:,} pages ...", flush=True)
        preload(bootstrap, topic, click_lines(args.lines, args.pages, 1))
        sc = create_spark_context("dstreams-event-bench", "local[2]")
        run_pass(sc, bootstrap, topic, Path(tmp) / "warm", args.batch_lines, event=False)
        plain = run_pass(sc, bootstrap, topic, Path(tmp) / "b", args.batch_lines, event=False)
        event = run_pass(sc, bootstrap, topic, Path(tmp) / "e", args.batch_lines, event=True)
        print(f"-- {plain.batches} batches of up to {args.batch_lines:,} clicks")
        print(f"batch-time windowed count: {plain.rate:>10,.0f} records/s")
        print(f"event-time windowed count: {event.rate:>10,.0f} records/s")
        print(f"ratio event / batch time: {event.rate / plain.rate:.2f}")
        assert isinstance(event.stream, EventWindowView)
        memory_per_window(sc, event.stream, Path(tmp) / "e")
        print(f"event windows emitted (latest revisions): {len(event_totals(event.sink)):,}")
        sc.stop()


if __name__ == "__main__":
    main()
