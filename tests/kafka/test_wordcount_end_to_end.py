"""Kafka → word count → files, end to end on the real broker and a real Spark.

Batches are driven directly through the lifecycle (no wall-clock waits), so the expected counts of
every batch can be derived from the offset ranges that batch planned and journaled.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from confluent_kafka import Producer

from connectors.planner import StartingOffsets
from service import testing
from service.driver.lifecycle import BatchLifecycle
from service.driver.recovery import JournalLog
from service.graph.context import StreamingContext
from service.graph.functions import add, pair_with_one, words_of
from service.journal.base import JournalState
from service.journal.file import FileJournal
from sinks.files import FileSink

PARTITIONS = 3
LINES_PER_PARTITION = 250
RATE_PER_PARTITION = 100  # offsets per 1 s batch, so the data spans several batches
INTERVAL_MS = 1000
VOCABULARY = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta"]


def produce_lines(bootstrap: str, topic: str) -> dict[int, list[str]]:
    return testing.produce_lines(
        bootstrap, topic, PARTITIONS, LINES_PER_PARTITION, VOCABULARY, seed=7
    )


def lines_of(
    sc: Any, app: str, bootstrap: str, topic: str, **split: int
) -> tuple[StreamingContext, Any]:
    """A context and its source of the topic's lines, `split` into read tasks as asked."""
    ctx = StreamingContext(sc, app, INTERVAL_MS, default_partitions=3)
    lines = ctx.kafka_stream(
        "lines",
        {"bootstrap.servers": bootstrap},
        topics=[topic],
        starting_offsets=StartingOffsets.earliest(),
        max_rate_per_partition=RATE_PER_PARTITION,
        **split,  # type: ignore[arg-type]  # min_partitions / max_partitions only
    ).values()
    return ctx, lines


def build_word_count(sc: Any, bootstrap: str, topic: str, out: Path) -> StreamingContext:
    ctx, lines = lines_of(sc, "wc-e2e", bootstrap, topic, min_partitions=4)
    lines.flat_map(words_of).map(pair_with_one).reduce_by_key(add).write("counts", FileSink(out))
    return ctx


def expected_counts(lines: dict[int, list[str]], ranges: Any) -> Counter[str]:
    counts: Counter[str] = Counter()
    for r in ranges:
        for line in lines[r.partition][r.from_offset : r.until_offset]:
            counts.update(words_of(line))
    return counts


def test_word_count_is_exact_per_batch_and_replays_identically(
    sc: Any, kafka_bootstrap: str, make_topic: Any, unique_name: str, tmp_path: Path
) -> None:
    topic = make_topic(kafka_bootstrap, unique_name, partitions=PARTITIONS)
    lines = produce_lines(kafka_bootstrap, topic)
    ctx = build_word_count(sc, kafka_bootstrap, topic, tmp_path / "out")
    journal = FileJournal(tmp_path / "journal")
    epoch = journal.open()
    lifecycle = BatchLifecycle(ctx, JournalLog(journal, epoch, ctx.graph_json()))
    lifecycle.setup_outputs()
    batch_times = [1_000_000 + i * INTERVAL_MS for i in range(4)]
    for t in batch_times:
        lifecycle.run_new(t)

    state = JournalState.from_records(journal.read())
    state.validate()
    sink = FileSink(tmp_path / "out")
    assert sink.committed_batches("counts") == batch_times
    total: Counter[str] = Counter()
    for t in batch_times:
        written = dict(map(tuple, sink.read_batch("counts", t)))
        expected = expected_counts(lines, state.planned[t].ranges)
        assert written == dict(expected), f"batch {t}"
        total.update(written)
    everything = Counter(w for part in lines.values() for line in part for w in words_of(line))
    assert total == everything
    assert state.pending() == []

    # A second, independent run over the journaled plans writes byte-identical files.
    replay_ctx = build_word_count(sc, kafka_bootstrap, topic, tmp_path / "replay")
    replay = BatchLifecycle(replay_ctx, journal=None)
    replay.setup_outputs()
    from service.driver.recovery import journaled_plan

    for t in batch_times:
        replay.replay(journaled_plan(state.planned[t], replay_ctx))
    for t in batch_times:
        first = sorted(p.read_bytes() for p in sink.batch_dir("counts", t).glob("part-*"))
        again = FileSink(tmp_path / "replay").batch_dir("counts", t)
        assert first == sorted(p.read_bytes() for p in again.glob("part-*"))
    ctx.close()
    replay_ctx.close()


def test_undecodable_records_are_counted_and_good_totals_stay_exact(
    sc: Any, kafka_bootstrap: str, make_topic: Any, unique_name: str, tmp_path: Path
) -> None:
    topic = make_topic(kafka_bootstrap, unique_name, partitions=2)
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    good: Counter[str] = Counter()
    bad = 0
    for i in range(1000):
        if i % 100 == 7:  # 1% malformed JSON
            producer.produce(topic, b'{"word": "broken', partition=i % 2)
            bad += 1
        else:
            word = VOCABULARY[i % len(VOCABULARY)]
            producer.produce(topic, f'{{"word": "{word}"}}'.encode(), partition=i % 2)
            good[word] += 1
    assert producer.flush(30) == 0

    ctx = StreamingContext(sc, "json-e2e", INTERVAL_MS, default_partitions=2)
    from service.graph.counters import CountersParam

    ctx.input_counters = sc.accumulator({}, CountersParam())
    records = ctx.kafka_stream(
        "events", {"bootstrap.servers": kafka_bootstrap}, topics=[topic], codec="json"
    )
    words = records.values().map(lambda event: (event["word"], 1)).reduce_by_key(add)
    words.write("counts", FileSink(tmp_path / "out"))
    lifecycle = BatchLifecycle(ctx, journal=None)
    lifecycle.setup_outputs()
    outcome = lifecycle.run_new(1_000_000)

    assert outcome.decode_errors == bad
    assert outcome.input_records == 1000
    written = dict(map(tuple, FileSink(tmp_path / "out").read_batch("counts", 1_000_000)))
    assert written == dict(good)
    ctx.close()


def test_packed_ranges_give_each_output_partition_the_same_lines_on_replay(
    sc: Any, kafka_bootstrap: str, make_topic: Any, unique_name: str, tmp_path: Path
) -> None:
    """`max_partitions` below the topic's partition count: a map-only output (no shuffle, so
    output partition p holds what read task p read) has that many partitions, each the lines of
    the ranges packed into it, and a replay from the journal writes the same partitions."""
    topic = make_topic(kafka_bootstrap, unique_name, partitions=PARTITIONS)
    lines = produce_lines(kafka_bootstrap, topic)

    def build(out: Path) -> StreamingContext:
        ctx, lines = lines_of(sc, "packed", kafka_bootstrap, topic, max_partitions=2)
        lines.write("lines", FileSink(out))
        return ctx

    ctx = build(tmp_path / "out")
    journal = FileJournal(tmp_path / "journal")
    lifecycle = BatchLifecycle(ctx, JournalLog(journal, journal.open(), ctx.graph_json()))
    lifecycle.setup_outputs()
    t = 1_000_000
    lifecycle.run_new(t)
    planned = JournalState.from_records(journal.read()).planned[t]
    sink = FileSink(tmp_path / "out")
    parts = sorted(sink.batch_dir("lines", t).glob("part-*"))
    assert len(parts) == 2
    written = sorted(sink.read_batch("lines", t))
    wanted = [
        line for r in planned.ranges for line in lines[r.partition][r.from_offset : r.until_offset]
    ]
    assert len(planned.ranges) == PARTITIONS
    assert written == sorted(wanted)

    from service.driver.recovery import journaled_plan

    replay_ctx = build(tmp_path / "replay")
    replay = BatchLifecycle(replay_ctx, journal=None)
    replay.setup_outputs()
    replay.replay(journaled_plan(planned, replay_ctx))
    again = sorted(FileSink(tmp_path / "replay").batch_dir("lines", t).glob("part-*"))
    assert [p.read_bytes() for p in parts] == [p.read_bytes() for p in again]
    ctx.close()
    replay_ctx.close()
