"""One source feeding several outputs is read from Kafka once per batch, and counted once.

Each read of a range adds its records to the input counters (`dstreams_input_records_total`, the
driver's `N records in`), so a batch whose counters equal its planned offsets read every range
exactly once; a second read would double them.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from connectors.planner import StartingOffsets
from service import testing
from service.driver.lifecycle import BatchLifecycle
from service.graph.context import StreamingContext
from service.graph.counters import InputRecords
from service.graph.functions import add, pair_with_one, words_of
from sinks.files import FileSink

PARTITIONS = 2
LINES_PER_PARTITION = 150
VOCABULARY = ["north", "south", "east", "west"]
BATCH_TIME = 1_000_000


def persisted_rdds(sc: Any) -> int:
    return int(sc._jsc.getPersistentRDDs().size())


def test_a_source_with_two_outputs_is_read_and_counted_once_per_batch(
    sc: Any, kafka_bootstrap: str, make_topic: Any, unique_name: str, tmp_path: Path
) -> None:
    topic = make_topic(kafka_bootstrap, unique_name, partitions=PARTITIONS)
    lines = testing.produce_lines(
        kafka_bootstrap, topic, PARTITIONS, LINES_PER_PARTITION, VOCABULARY, seed=3
    )
    ctx = StreamingContext(sc, "shared-source", 1000, default_partitions=2)
    ctx.attach_spark(sc)
    source = ctx.kafka_stream(
        "lines",
        {"bootstrap.servers": kafka_bootstrap},
        topics=[topic],
        starting_offsets=StartingOffsets.earliest(),
    ).values()
    out = FileSink(tmp_path / "out")
    source.flat_map(words_of).map(pair_with_one).reduce_by_key(add).write("counts", out)
    source.write("raw", out)
    lifecycle = BatchLifecycle(ctx, journal=None)
    lifecycle.setup_outputs()
    before = persisted_rdds(sc)

    outcome = lifecycle.run_new(BATCH_TIME)

    produced = PARTITIONS * LINES_PER_PARTITION
    assert sum(r.count for r in outcome.plan.ranges) == produced
    assert outcome.input_records == produced, "the source's ranges were read more than once"
    per_partition = {
        key.partition: n for key, n in outcome.counters.items() if isinstance(key, InputRecords)
    }
    assert per_partition == dict.fromkeys(range(PARTITIONS), LINES_PER_PARTITION)
    everything = [line for partition in lines.values() for line in partition]
    assert sorted(out.read_batch("raw", BATCH_TIME)) == sorted(everything)
    counts = dict(map(tuple, out.read_batch("counts", BATCH_TIME)))
    assert counts == dict(Counter(w for line in everything for w in words_of(line)))
    # The batch's persisted read is released once the batch is done.
    assert persisted_rdds(sc) == before
    ctx.close()
