"""Live state queries over HTTP, on a real Spark with a real file journal and checkpoints.

Batches run on a thread of their own (as the scheduler's) while the test asks the driver's HTTP
endpoint for keys, prefixes and non-string keys. Every answer names the batch it is as of; it
must equal the plain-Python reference model's state after that very batch, and that batch must
have been journaled completed before the answer came. A batch held in flight (its state
computed, its output not yet committed) is never the one answered."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from service.driver.checkpoints import StateCheckpoints
from service.driver.lifecycle import BatchLifecycle
from service.driver.recovery import JournalLog, recover
from service.graph.checkpoint_store import CheckpointStore
from service.graph.context import StreamingContext
from service.graph.query_jobs import Deadline, key_partition
from service.graph.queryable import MAX_LIMIT
from service.graph.state_spec import StateSpec
from service.journal.file import FileJournal
from service.journal.records import CompletedRecord, JournalRecord
from service.observe.http import HttpServer
from service.observe.metrics import Metrics
from service.observe.status import StatusBoard
from service.testing import FIRST_BATCH_MS, INTERVAL_MS
from sinks.base import BatchKey, WriteResult
from sinks.memory import MemorySink
from tests.spark import reference_model as model
from tests.spark.test_state_recovery import running_total

ROOT = Path(__file__).resolve().parents[2]
CHECKPOINT_EVERY = 3
SESSION_TIMEOUT_MS = 2 * INTERVAL_MS
WORDS = ("apple", "apricot", "avocado", "banana", "blueberry", "cherry", "cranberry", "date", "fig")
"""Keys sharing prefixes, of several lengths (the lengths are a state keyed by int)."""


def word_pair(word: str) -> tuple[str, int]:
    return (word, 1)


def length_pair(word: str) -> tuple[int, int]:
    return (len(word), 1)


def visits(batch_time: int, key: str, value: int | None, state: Any) -> None:
    """A `map_with_state` function whose state is a tuple: (visits, last batch time)."""
    if not state.is_timing_out():
        seen = state.get()[0] if state.exists() else 0
        state.update((seen + 1, batch_time))


def queryable_graph(ctx: StreamingContext, lines: list[list[str]], sink: MemorySink) -> None:
    words = ctx.queue_stream(lines).flat_map(str.split)
    totals = words.map(word_pair).update_state_by_key(running_total, num_partitions=4)
    totals.queryable("totals").write("totals", sink)
    lengths = words.map(length_pair).update_state_by_key(running_total, num_partitions=3)
    lengths.queryable("lengths").write("lengths", sink)
    spec = StateSpec(visits, timeout_ms=SESSION_TIMEOUT_MS, num_partitions=2)
    words.map(word_pair).map_with_state(spec).queryable("visits").write("visits", sink)
    hidden = words.map(word_pair).update_state_by_key(running_total)
    hidden.write("hidden", sink)  # a keyed state nobody made queryable


def make_lines(seed: int, batches: int) -> list[list[str]]:
    rng = random.Random(seed)
    return [
        [" ".join(rng.choices(WORDS, k=rng.randint(1, 5))) for _ in range(rng.randint(0, 4))]
        for _ in range(batches)
    ]


def reference(lines: list[list[str]]) -> dict[str, list[dict[Any, Any]]]:
    """Each queryable state after each batch, from the reference model."""
    words = [[w for line in batch for w in line.split()] for batch in lines]
    totals = model.update_state_by_key([[(w, 1) for w in b] for b in words], running_total)
    lengths = model.update_state_by_key([[(len(w), 1) for w in b] for b in words], running_total)
    _, visited = model.map_with_state([[(w, 1) for w in b] for b in words], visits, 2000)
    return {
        "totals": [dict(rows) for rows in totals],
        "lengths": [dict(rows) for rows in lengths],
        "visits": [{k: list(v) for k, v in rows} for rows in visited],
    }


class CompletedJournal(FileJournal):
    """The file journal, remembering which batches it has journaled completed (once the
    append returned: durable)."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.completed: set[int] = set()

    def append(self, record: JournalRecord) -> None:
        super().append(record)
        if isinstance(record, CompletedRecord):
            self.completed.add(record.batch_time)


class HoldsABatch(MemorySink):
    """Stops the driver's write of one batch's output until released: that batch's state is
    computed (the write job ran) but the batch is not completed."""

    def __init__(self, batch_time: int) -> None:
        super().__init__()
        self.batch_time = batch_time
        self.entered = threading.Event()
        self.release = threading.Event()

    def write(self, key: BatchKey, rows: Any) -> WriteResult:
        if key.batch_time == self.batch_time and key.output == "totals":
            self.entered.set()
            self.release.wait()
        return super().write(key, rows)


class QueriedDriver:
    """A driver's graph, journal, checkpoints and HTTP endpoint, run batch by batch."""

    def __init__(self, sc: Any, workdir: Path, lines: list[list[str]], sink: MemorySink) -> None:
        self.ctx = StreamingContext(sc, "queried", INTERVAL_MS, 2)
        queryable_graph(self.ctx, lines, sink)
        self.journal = CompletedJournal(workdir / "journal")
        self.epoch = self.journal.open()
        log = JournalLog(self.journal, self.epoch, self.ctx.graph_json())
        store = CheckpointStore(workdir / "checkpoints")
        checkpoints = StateCheckpoints(self.ctx, store, log, CHECKPOINT_EVERY)
        self.lifecycle = BatchLifecycle(self.ctx, log, checkpoints=checkpoints)
        self.lifecycle.setup_outputs()
        board, metrics = StatusBoard("queried", INTERVAL_MS), Metrics(process_metrics=False)
        self.http = HttpServer(board, metrics, "127.0.0.1", 0, lambda: self.ctx.queries)
        self.port = self.http.start()

    def recover(self) -> None:
        recover(self.ctx, self.journal, self.lifecycle, self.epoch)
        self.ctx.queries.open()

    def run(self, first: int, count: int) -> None:
        for index in range(first, first + count):
            self.lifecycle.run_new(FIRST_BATCH_MS + index * INTERVAL_MS)

    def get(self, path: str) -> tuple[int, dict[str, Any]]:
        url = f"http://127.0.0.1:{self.port}{path}"
        try:
            with urllib.request.urlopen(url, timeout=60) as reply:  # noqa: S310 - our own server
                return reply.status, json.loads(reply.read())
        except urllib.error.HTTPError as error:
            return error.code, json.loads(error.read())


@pytest.fixture
def driver_of(sc: Any, tmp_path: Path) -> Iterator[Any]:
    made: list[QueriedDriver] = []

    def make(lines: list[list[str]], sink: MemorySink) -> QueriedDriver:
        made.append(QueriedDriver(sc, tmp_path / "run", lines, sink))
        return made[-1]

    yield make
    for driver in made:
        driver.http.stop()


def index_of(batch_time: int) -> int:
    return (batch_time - FIRST_BATCH_MS) // INTERVAL_MS


def check_answer(
    driver: QueriedDriver, expected: dict[str, list[dict[Any, Any]]], path: str
) -> int | None:
    """Asks `path`; checks a 200 or 404 answer against the reference as of the batch it names,
    which must be journaled completed. Returns that batch time (None for a 503)."""
    status, answer = driver.get(path)
    if status == 503:
        return None
    batch_time = answer["batch_time_ms"]
    assert batch_time in driver.journal.completed, (path, answer)
    state = expected[path.split("/")[2].split("?")[0]][index_of(batch_time)]
    if "entries" in answer:
        keys = sorted(k for k in state if answer["prefix"] == "" or k.startswith(answer["prefix"]))
        # The first matches in the state's partition order, not in key order.
        found = [e["key"] for e in answer["entries"]]
        assert len(set(found)) == len(found) == min(len(keys), answer["limit"])
        assert set(found) <= set(keys)
        assert all(e["value"] == state[e["key"]] for e in answer["entries"])
        assert answer["more"] == (len(keys) > answer["limit"])
        return int(batch_time)
    key = tuple(answer["key"]) if isinstance(answer["key"], list) else answer["key"]
    if status == 404:
        assert key not in state, answer
    else:
        assert status == 200 and answer["value"] == state[key], (answer, state.get(key))
    return int(batch_time)


def some_path(rng: random.Random) -> str:
    word = rng.choice((*WORDS, "kiwi"))  # kiwi is never in the state: 404
    return rng.choice(
        (
            f"/state/totals/{word}",
            f"/state/visits/{word}",
            f"/state/lengths?key_json={rng.randint(3, 10)}",
            f"/state/totals?prefix={word[: rng.randint(0, 2)]}&limit={rng.randint(1, 4)}",
        )
    )


def test_answers_equal_the_reference_as_of_the_completed_batch_they_name(driver_of: Any) -> None:
    lines = make_lines(7, 12)
    expected = reference(lines)
    driver = driver_of(lines, MemorySink())
    assert driver.get("/state/totals/apple")[0] == 503  # recovering
    driver.recover()
    status, answer = driver.get("/state/totals/apple")
    assert status == 503 and "no batch has completed" in answer["error"]

    batches = threading.Thread(target=driver.run, args=(0, len(lines)))
    batches.start()
    rng = random.Random(3)
    named: set[int] = set()
    try:
        while batches.is_alive():
            named.add(check_answer(driver, expected, some_path(rng)) or 0)
    finally:
        batches.join()
    for word in WORDS:  # after the last batch, every key once more
        check_answer(driver, expected, f"/state/totals/{word}")
        check_answer(driver, expected, f"/state/visits/{urllib.parse.quote(word)}")
    last = FIRST_BATCH_MS + (len(lines) - 1) * INTERVAL_MS
    assert check_answer(driver, expected, f"/state/totals?prefix=&limit={MAX_LIMIT}") == last
    assert len(named - {0}) >= 1


def test_a_batch_in_flight_is_never_answered(driver_of: Any) -> None:
    lines = make_lines(11, 6)
    expected = reference(lines)
    held = FIRST_BATCH_MS + 4 * INTERVAL_MS
    sink = HoldsABatch(held)
    driver = driver_of(lines, sink)
    driver.recover()
    driver.run(0, 4)
    in_flight = threading.Thread(target=driver.run, args=(4, 1))
    in_flight.start()
    try:
        sink.entered.wait()
        for word in WORDS:
            assert check_answer(driver, expected, f"/state/totals/{word}") == held - INTERVAL_MS
        prefix = check_answer(driver, expected, "/state/visits?prefix=a&limit=2")
        assert prefix == held - INTERVAL_MS
    finally:
        sink.release.set()
        in_flight.join()
    assert check_answer(driver, expected, "/state/totals/apple") == held


def test_only_queryable_states_answer_and_bad_queries_say_why(driver_of: Any) -> None:
    lines = make_lines(5, 2)
    driver = driver_of(lines, MemorySink())
    driver.recover()
    driver.run(0, 2)
    status, answer = driver.get("/state/hidden/apple")
    assert status == 404 and "totals" not in json.dumps(answer)
    status, answer = driver.get("/state/totals/kiwi")
    assert status == 404 and answer["batch_time_ms"] == FIRST_BATCH_MS + INTERVAL_MS
    assert driver.get("/state/totals?prefix=a&limit=0")[0] == 400
    assert driver.get(f"/state/totals?prefix=a&limit={MAX_LIMIT + 1}")[0] == 400
    assert driver.get("/state/lengths?key_json={}")[0] == 400
    assert driver.get("/state/totals")[0] == 400


PLACED_KEYS = (*WORDS, "", "ünïcødé", 42, -7, (1, "a"), ("eu", (2, None)), None, 2.5, True)


def with_partition(index: int, rows: Iterator[tuple[Any, int]]) -> Iterator[tuple[Any, int]]:
    for key, _ in rows:
        yield (key, index)


def test_a_key_is_looked_for_in_the_partition_spark_put_it(sc: Any) -> None:
    """Where `partitionBy` puts each key, the query looks: placed by a worker when this process
    hashes otherwise, and by a driver started with the workers' seed (as `dstreams run` is)."""
    pairs = sc.parallelize([(key, 1) for key in PLACED_KEYS], 2).partitionBy(5)
    placed = dict(pairs.mapPartitionsWithIndex(with_partition).collect())
    here = {key: key_partition(sc, key, 5, Deadline(60)) for key in PLACED_KEYS}
    assert here == placed
    script = (
        "import json, sys; from service.graph.state_lookup import partition_of; "
        f"print(json.dumps([partition_of(5, key) for key in {PLACED_KEYS!r}]))"
    )
    env = {**os.environ, "PYTHONHASHSEED": "0", "PYTHONPATH": str(ROOT)}
    seeded = subprocess.run(  # noqa: S603 - this interpreter, our own script
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True
    )
    assert json.loads(seeded.stdout) == [placed[key] for key in PLACED_KEYS]
