"""The job-shape matrix: jobs users write, not only the examples, as a `dstreams run` subprocess.

Shapes (tests/kafka/shape_jobs.py): map-only, a second output from the same source (a word
count), a join of two sources, a union, a repartition; over input topics of 1, 8 and 32
partitions; each to Kafka, PostgreSQL and files. All 45 outputs run in one service process (one
start, one Spark) and each is checked exact: the multiset of rows it holds is the one expected
from the input (and, for the count and the join, from how the journal cut it into batches).

A map-only output has a task per input range, a union as many as both inputs: up to 64 here, so
the Kafka sink's marker topic has to grow past its setup size in the first batch
(docs/architecture.md, "Sinks").

The second test grows a topic's partitions and creates a topic matching a regex subscription
while the service runs: each new partition and topic is read from its beginning, exactly once,
though the driver dies in the middle of a Kafka transaction after the growth and is restarted.
"""

from __future__ import annotations

import random
import re
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, NewPartitions

from service.dev.brokers import create_topic
from service.dev.service_process import ServiceProcess
from service.faults import CRASH_EXIT_CODE
from service.graph.functions import words_of
from tests.kafka import shape_checks as checks
from tests.kafka.shape_jobs import SHAPES, SINKS, SIZES, output_name, split_id

A_LINES = 120
B_LINES = 60
# The second input of a join or a union: a small topic beside a large one (as a table of
# dimensions beside one of facts), which keeps the matrix's task count and runtime down.
B_PARTITIONS = 2
# Per partition per 1 s batch: every input fits in the first batch, so that each of the 45
# outputs runs one Spark job (batches with fewer tasks follow in the second test).
RATE = 200
DRAIN_TIMEOUT_S = 300.0
Batch = dict[str, list[str]]
StartDriver = Callable[..., ServiceProcess]


@pytest.fixture
def app(unique_name: str) -> str:
    # Short: it names topics, tables and transactional ids.
    return "shapes_" + re.sub(r"\W", "_", unique_name).rsplit("_", 1)[1]


@pytest.fixture
def driver_of(tmp_path: Path) -> Iterator[StartDriver]:
    """Starts the service with a config (and environment); killed (by PID) at teardown if still
    running."""
    started: list[ServiceProcess] = []

    def start(config: dict[str, Any], env: dict[str, str] | None = None) -> ServiceProcess:
        driver = ServiceProcess(config, tmp_path)
        started.append(driver)
        driver.start(env)
        return driver

    yield start
    for driver in started:
        if driver.running():
            driver.kill()


def _wait_drained(
    driver: ServiceProcess, tmp: Path, written: dict[checks.Position, str], what: str
) -> None:
    driver.wait_for(lambda _s: checks.drained(tmp, written), DRAIN_TIMEOUT_S, f"{what} processed")


def a_lines(size: int) -> list[str]:
    rng = random.Random(size)
    words = [f"w{i}" for i in range(12)]
    return [f"{i:04d} {' '.join(rng.choices(words, k=rng.randint(1, 4)))}" for i in range(A_LINES)]


def b_lines(size: int) -> list[str]:
    return [f"{2 * j:04d} x{(j + size) % 5}" for j in range(B_LINES)]


@pytest.mark.timeout(600)  # ~1.5 min on an idle 2-core machine, up to 3 under a heavy load
def test_every_shape_over_every_partition_count_to_every_sink_is_exact(
    kafka_bootstrap: str,
    postgres_dsn: str,
    app: str,
    tmp_path: Path,
    driver_of: StartDriver,
) -> None:
    written: dict[checks.Position, str] = {}
    sources: dict[str, Any] = {}
    for size in SIZES:
        for side, lines, partitions in (
            ("a", a_lines(size), size),
            ("b", b_lines(size), B_PARTITIONS),
        ):
            topic = create_topic(kafka_bootstrap, f"{app}.{side}{size}", partitions=partitions)
            written |= checks.produce(kafka_bootstrap, topic, lines, range(partitions))
            sources[f"{side}{size}"] = checks.source_config(RATE, topics=[topic])
    outputs = [output_name(shape, n, sink) for n in SIZES for shape in SHAPES for sink in SINKS]
    files = tmp_path / "files"
    sinks = {name: checks.sink_config(app, name, postgres_dsn, files) for name in outputs}
    job = "tests.kafka.shape_jobs:build"
    config = checks.service_config(app, job, kafka_bootstrap, sources, sinks, tmp_path)

    driver = driver_of(config)
    _wait_drained(driver, tmp_path, written, "every line")
    assert driver.terminate() == 0, driver.log_tail()

    batches = checks.batches(tmp_path, written)
    found = _read_outputs(kafka_bootstrap, postgres_dsn, app, files, outputs)
    wrong = []
    for size in SIZES:
        expected = _expected(app, size, batches)
        for shape in SHAPES:
            for sink in SINKS:
                name = output_name(shape, size, sink)
                if found[name] != expected[shape]:
                    wrong.append(_difference(name, found[name], expected[shape]))
    assert not wrong, "\n".join(wrong)
    assert len({t for batch in batches for t in batch}) == 2 * len(SIZES)  # every topic read


def _expected(app: str, size: int, batches: list[Batch]) -> dict[str, checks.Rows]:
    a_topic, b_topic = f"{app}.a{size}", f"{app}.b{size}"
    a_rows = Counter(map(split_id, a_lines(size)))
    b_rows = Counter(map(split_id, b_lines(size)))

    def counts(batch: Batch) -> list[tuple[str, str]]:
        words = Counter(w for line in batch.get(a_topic, []) for w in words_of(split_id(line)[1]))
        return [(word, str(n)) for word, n in words.items()]

    def joined(batch: Batch) -> list[tuple[str, str]]:
        right = dict(map(split_id, batch.get(b_topic, [])))
        left = map(split_id, batch.get(a_topic, []))
        return [(key, f"{value}|{right[key]}") for key, value in left if key in right]

    return {
        "map": a_rows,
        "count": checks.per_batch(batches, counts),
        "join": checks.per_batch(batches, joined),
        "union": a_rows + b_rows,
        "repartition": a_rows,
    }


def _read_outputs(
    bootstrap: str, dsn: str, app: str, files: Path, outputs: list[str]
) -> dict[str, checks.Rows]:
    kafka = [name for name in outputs if name.endswith("_kafka")]
    by_topic = checks.read_kafka(bootstrap, [checks.kafka_topic(app, name) for name in kafka])
    found = {name: by_topic[checks.kafka_topic(app, name)] for name in kafka}
    for name in outputs:
        if name.endswith("_pg"):
            found[name] = checks.read_table(dsn, checks.table(app, name))
        elif name.endswith("_files"):
            found[name] = checks.read_files(files, name)
    return found


def _difference(name: str, found: checks.Rows, expected: checks.Rows) -> str:
    extra, missing = found - expected, expected - found
    return (
        f"{name}: {sum(found.values())} rows, expected {sum(expected.values())}; "
        f"extra {sorted(extra.items())[:5]}, missing {sorted(missing.items())[:5]}"
    )


@pytest.mark.timeout(600)
def test_new_partitions_and_topics_matching_a_pattern_are_read_once(
    kafka_bootstrap: str,
    postgres_dsn: str,
    app: str,
    tmp_path: Path,
    driver_of: StartDriver,
) -> None:
    grow = create_topic(kafka_bootstrap, f"{app}.grow", partitions=2)
    first = create_topic(kafka_bootstrap, f"{app}.pattern.first", partitions=2)
    written = checks.produce(kafka_bootstrap, grow, _lines("g", 40), range(2))
    written |= checks.produce(kafka_bootstrap, first, _lines("p", 40), range(2))
    sources = {
        "grow": checks.source_config(RATE, topics=[grow]),
        "pattern": checks.source_config(RATE, pattern=re.escape(f"{app}.pattern.") + ".*"),
    }
    outputs = [f"{source}_{sink}" for source in sources for sink in SINKS]
    files = tmp_path / "files"
    sinks = {name: checks.sink_config(app, name, postgres_dsn, files) for name in outputs}
    job = "tests.kafka.shape_jobs:build_growing"
    config = checks.service_config(app, job, kafka_bootstrap, sources, sinks, tmp_path)
    del config["default_partitions"]  # the layout a user gets: chosen per batch, journaled

    # The driver dies inside a Kafka transaction after the growth (the first batch commits 2: a
    # small batch is one task per output), and its successor replays that batch from the
    # journaled plan, in the journaled layout.
    driver = driver_of(config, {"DSTREAMS_CRASH_AT": "sink-mid-write", "DSTREAMS_CRASH_AFTER": "3"})
    _wait_drained(driver, tmp_path, written, "the first lines")
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    admin.create_partitions([NewPartitions(grow, 6)])[grow].result(30)
    second = create_topic(kafka_bootstrap, f"{app}.pattern.second", partitions=3)
    written |= checks.produce(kafka_bootstrap, grow, _lines("h", 120), range(6))
    written |= checks.produce(kafka_bootstrap, second, _lines("q", 60), range(3))
    assert driver.wait(DRAIN_TIMEOUT_S) == CRASH_EXIT_CODE, driver.log_tail()
    driver.start()
    _wait_drained(driver, tmp_path, written, "the new lines")
    assert driver.terminate() == 0, driver.log_tail()

    found = _read_outputs(kafka_bootstrap, postgres_dsn, app, files, outputs)
    by_source = {
        source: Counter(split_id(line) for (t, _, _), line in written.items() if t in topics)
        for source, topics in (("grow", {grow}), ("pattern", {first, second}))
    }
    wrong = [
        _difference(name, found[name], by_source[name.rsplit("_", 1)[0]])
        for name in outputs
        if found[name] != by_source[name.rsplit("_", 1)[0]]
    ]
    assert not wrong, "\n".join(wrong)
    read = {(r.topic, r.partition) for r in _all_ranges(tmp_path) if r.count}
    assert read >= {(grow, p) for p in range(6)} | {(second, p) for p in range(3)}
    # Each start logged its layout once; every batch was planned with its layout (small
    # batches: one task) and run in it.
    layouts = [line for line in driver.log_path.read_text().splitlines() if "task layout: " in line]
    assert len(layouts) == 2, layouts
    assert all("1 task per 20,000 records, at most 2" in line for line in layouts), layouts
    state = checks.journal_state(tmp_path)
    assert {plan.extra.get("layout", {}).get("tasks") for plan in state.planned.values()} == {1}
    assert {n for done in state.completed.values() for n in done.partitions.values()} <= {0, 1}


def _lines(prefix: str, count: int) -> list[str]:
    return [f"{prefix}{i:04d} line {i}" for i in range(count)]


def _all_ranges(tmp: Path) -> list[Any]:
    state = checks.journal_state(tmp)
    return [r for plan in state.planned.values() for r in plan.ranges]
