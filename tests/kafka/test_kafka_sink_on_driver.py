"""The Kafka sink writing from the driver (`write_from`), against a real broker and a real Spark.

Under a local master, `write_from="auto"` runs each partition's transaction in the driver, whose
producers live as long as the driver; the fencing that keeps one copy per `BatchKey` is the same
as on executors (docs/architecture.md, "Sinks").
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition

from service.config.masters import parse_master
from service.driver.lifecycle import BatchLifecycle
from service.graph.context import StreamingContext
from service.graph.functions import add, pair_with_one
from sinks.base import BatchKey, WriteResult
from sinks.kafka import KafkaSink, close_clients

APP = "drvapp"
TRANSACTION_TIMEOUT_MS = 10_000
PARTITIONS = 2
WORDS = ["alpha", "beta", "gamma", "delta", "epsilon"]


@pytest.fixture(autouse=True)
def _fresh_clients() -> Iterator[None]:
    close_clients()
    yield
    close_clients()


def _sink(
    bootstrap: str, name: str, write_from: Any = "auto", master: str = "local[2]"
) -> KafkaSink:
    return KafkaSink(
        {"bootstrap.servers": bootstrap},
        f"{name}_out",
        partitions=PARTITIONS,
        transaction_timeout_ms=TRANSACTION_TIMEOUT_MS,
        write_from=write_from,
        # As the wiring decides it: from the configured Spark master.
        local_master=parse_master(master).is_local,
    )


def _committed(bootstrap: str, topic: str) -> list[tuple[bytes, bytes]]:
    """Every (key, value) of `topic` a read_committed consumer sees, in no particular order."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"{topic}_verifier",
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
            "enable.auto.commit": False,
        }
    )
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
        pending, records = set(range(PARTITIONS)), []
        for _ in range(200):
            message = consumer.poll(1.0)
            if message is None:
                continue
            if message.error() is not None:
                pending.discard(message.partition())
                if not pending:
                    break
                continue
            records.append((message.key(), message.value()))
        assert not pending, f"partitions {sorted(pending)} of {topic} never reached their end"
        return records
    finally:
        consumer.close()


def test_under_a_local_master_auto_writes_from_the_driver_with_producers_opened_at_setup(
    sc: Any, kafka_bootstrap: str, unique_name: str
) -> None:
    batches = [[WORDS[(i * 7 + b) % len(WORDS)] for i in range(40)] for b in range(4)]
    ctx = StreamingContext(sc, APP, 1000, default_partitions=PARTITIONS)
    sink = _sink(kafka_bootstrap, unique_name, master=sc.master)
    ctx.queue_stream(batches).map(pair_with_one).reduce_by_key(add).write("counts", sink)
    lifecycle = BatchLifecycle(ctx, journal=None)
    lifecycle.setup_outputs()

    outcomes = [lifecycle.run_new(1_000_000 + b * 1000) for b in range(len(batches))]

    assert sink.writes_on_driver  # the session's SparkContext runs local[2]
    opened = [sum(r.opened_clients for r in o.outputs) for o in outcomes]
    written = [sum(r.partitions for r in o.outputs) for o in outcomes]
    # Setup opened one producer per partition, and no batch had to initialize one again.
    assert written == [PARTITIONS] * len(batches)
    assert opened == [0] * len(batches)
    totals: Counter[str] = Counter()
    for key, value in _committed(kafka_bootstrap, sink.topic):
        totals[key.decode()] += int(value)
    assert totals == Counter(word for batch in batches for word in batch)
    ctx.close()


def test_write_from_executors_is_kept_under_a_local_master(
    sc: Any, kafka_bootstrap: str, unique_name: str
) -> None:
    assert sc.master.startswith("local[")
    assert not _sink(kafka_bootstrap, unique_name, "executors", sc.master).writes_on_driver
    assert _sink(kafka_bootstrap, unique_name, "driver", sc.master).writes_on_driver


ZOMBIE = textwrap.dedent(
    """
    import sys
    from sinks.base import BatchKey
    from sinks.kafka import KafkaSink

    bootstrap, topic, output = sys.argv[1:4]
    sink = KafkaSink({"bootstrap.servers": bootstrap}, topic, partitions=2,
                     transaction_timeout_ms=10000, write_from="driver")
    print(sink.write(BatchKey("drvapp", output, 1000, 0), [("old", 1)]), flush=True)
    sys.stdin.readline()  # the new driver has taken over meanwhile
    print(sink.write(BatchKey("drvapp", output, 2000, 0), [("zombie", 1)]), flush=True)
    """
)


def test_a_zombie_drivers_long_lived_producer_is_fenced_and_one_copy_is_committed(
    kafka_bootstrap: str, unique_name: str
) -> None:
    sink = _sink(kafka_bootstrap, unique_name, "driver")
    sink.setup(APP, unique_name)
    zombie = subprocess.Popen(  # noqa: S603 - our own script
        [sys.executable, "-c", ZOMBIE, kafka_bootstrap, sink.topic, unique_name],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert zombie.stdout is not None and zombie.stdin is not None
        assert "rows=1" in zombie.stdout.readline()  # the old driver holds partition 0's id

        # The new driver replays batch 1000 (already committed) and writes batch 2000.
        replayed = sink.write(BatchKey(APP, unique_name, 1000, 0), [("old", 1)])
        written = sink.write(BatchKey(APP, unique_name, 2000, 0), [("new", 1)])
        zombie.stdin.write("go\n")
        zombie.stdin.flush()
        late = zombie.stdout.readline()
    finally:
        zombie.kill()
        zombie.wait(30)

    assert replayed == WriteResult(0, skipped=True)
    assert written == WriteResult(1)
    # The zombie's cached producer was fenced by the new one; it finds batch 2000 committed.
    assert "skipped=True" in late, late
    assert sorted(_committed(kafka_bootstrap, sink.topic)) == [(b"new", b"1"), (b"old", b"1")]
