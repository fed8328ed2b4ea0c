"""Shared parts of the chaos tier: the three-sink word-count app, its input, and the verifier.

Every test runs `examples.wordcount_all_sinks` as a real `dstreams run` subprocess (see
`service.dev.service_process`) against real Kafka, PostgreSQL and Spark, kills things, and then
reads every sink back:

- Kafka (`counts_kafka`): the output topic read `read_committed`, values summed per key; the marker
  topic read `read_committed`, each (batch, partition) exactly once; on every partition of both
  topics the last stable offset equals the high watermark (no transaction left open).
- PostgreSQL (`counts_pg`): `SELECT word, sum(n) ... GROUP BY word`; the marker table holds every
  partition of every batch; no session of the test's own database is `idle in transaction`.
- Files (`counts_files`): committed batches (`_SUCCESS`) summed; each has all its part files,
  and no batch folder lacks `_SUCCESS`.
- The journal validates, has no pending batch, and its non-empty completed batches are exactly the
  batches every sink holds.
- `dstreams audit` finds no violation: the journal's offsets planned exactly once, and every
  (output, batch, partition) of the Kafka and PostgreSQL outputs and of the dead letters committed
  exactly once, with the data their markers name.

Each test gets its own topics, app id, PostgreSQL database and work folder, and every service
process it starts is SIGKILLed (by PID) at teardown if still running.
"""

from __future__ import annotations

import os
import random
import re
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
import pytest
import yaml
from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    Producer,
    TopicPartition,
)
from psycopg import sql
from psycopg.conninfo import make_conninfo

from connectors.kafka_client import end_offsets
from service.cli.sink_audit import check_file_output, check_outputs
from service.config.settings import Settings
from service.dev.brokers import create_topic
from service.dev.service_process import ServiceProcess
from service.graph.functions import words_of
from service.journal.audit import audit_journal
from service.journal.base import JournalState
from service.journal.file import FileJournal
from service.journal.records import JournalRecord, SnapshotRecord, decode_bytes
from sinks.files import SUCCESS, FileSink

KAFKA_OUT = "counts_kafka"
PG_OUT = "counts_pg"
FILES_OUT = "counts_files"
OUTPUTS = (KAFKA_OUT, PG_OUT, FILES_OUT)
SOURCE = "lines"
INPUT_PARTITIONS = 4
OUTPUT_PARTITIONS = 4
VOCABULARY = tuple(f"w{i:03d}" for i in range(400))
# Long enough for a restarted driver to catch up on what it missed, short enough to fail a
# stuck test well within its pytest timeout.
DRAIN_TIMEOUT_S = 240.0
# Spark, the sinks' clients and recovery start in ~5-10 s on an idle 2-core machine.
START_TIMEOUT_S = 90.0
JOB = "examples.wordcount_all_sinks:build"


# --- input -----------------------------------------------------------------------------------


def chaos_seed() -> int:
    """The run's seed: `CHAOS_SEED` if set, else a fresh one; printed so a run can be repeated."""
    seed = int(os.environ.get("CHAOS_SEED") or random.SystemRandom().randrange(2**31))
    print(f"chaos seed: {seed} (CHAOS_SEED={seed} repeats this run's choices)")
    return seed


def make_lines(seed: int, count: int) -> list[str]:
    """`count` lines of 1-8 words from `VOCABULARY`, the same for the same seed."""
    rng = random.Random(seed)
    return [" ".join(rng.choices(VOCABULARY, k=rng.randint(1, 8))) for _ in range(count)]


def word_totals(lines: list[str]) -> Counter[str]:
    totals: Counter[str] = Counter()
    for line in lines:
        totals.update(words_of(line))
    return totals


class InputProducer:
    """Writes input values round-robin over the input partitions (idempotent, acks=all) and
    remembers where each one landed."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.topic = topic
        self.producer = Producer(
            {"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 20}
        )
        self.sent = 0

    def send(self, values: list[bytes]) -> list[tuple[int, int]]:
        """Produces `values` and waits until all are acknowledged; their (partition, offset)."""
        where: list[tuple[int, int]] = [(-1, -1)] * len(values)

        def delivered(position: int) -> Callable[[Any, Any], None]:
            def report(error: Any, message: Any) -> None:
                if error is None:
                    where[position] = (int(message.partition()), int(message.offset()))

            return report

        for position, value in enumerate(values):
            partition = (self.sent + position) % INPUT_PARTITIONS
            while True:
                try:
                    self.producer.produce(
                        self.topic, value, partition=partition, on_delivery=delivered(position)
                    )
                    break
                except BufferError:
                    self.producer.poll(0.05)
            if position % 5000 == 0:
                self.producer.poll(0)
        left = self.producer.flush(60)
        assert left == 0, f"{left} input records were not acknowledged within 60 s"
        assert (-1, -1) not in where, "some input records were not acknowledged"
        self.sent += len(values)
        return where


def produce(bootstrap: str, topic: str, values: list[bytes]) -> list[tuple[int, int]]:
    """Writes `values` to an empty `topic` round-robin; returns each one's (partition, offset)."""
    return InputProducer(bootstrap, topic).send(values)


class Feeder(threading.Thread):
    """Produces `values` in the background at about `per_second` records/s (streamed input).

    `producer` continues the round-robin of whoever preloaded the topic."""

    def __init__(self, producer: InputProducer, values: list[bytes], per_second: int) -> None:
        super().__init__(name="chaos-feeder", daemon=True)
        self.producer, self.values, self.per_second = producer, values, per_second
        self.positions: list[tuple[int, int]] = []
        self.error: BaseException | None = None
        self.done = threading.Event()

    @classmethod
    def after_preloading(
        cls, bootstrap: str, topic: str, values: list[bytes], preloaded: int, per_second: int
    ) -> tuple[list[tuple[int, int]], Feeder]:
        """Writes the first `preloaded` of `values` to `topic` now; returns their positions and a
        feeder (not started) for the rest."""
        producer = InputProducer(bootstrap, topic)
        positions = producer.send(values[:preloaded])
        return positions, cls(producer, values[preloaded:], per_second)

    def run(self) -> None:
        try:
            step = max(1, self.per_second // 5)
            started = time.monotonic()
            for begin in range(0, len(self.values), step):
                self.positions += self.producer.send(self.values[begin : begin + step])
                due = started + (begin + step) / self.per_second
                time.sleep(max(0.0, due - time.monotonic()))
        except BaseException as exc:  # reported by finish()
            self.error = exc
        finally:
            self.done.set()

    def finish(self, timeout_s: float = 120) -> None:
        self.join(timeout_s)
        assert self.done.is_set(), "the input feeder did not finish"
        if self.error is not None:
            msg = f"the input feeder failed: {self.error!r}"
            raise AssertionError(msg) from self.error


# --- the app under test ----------------------------------------------------------------------


@dataclass
class ChaosApp:
    """One word-count app: its topics, database, folders, config and driver processes."""

    app_id: str
    bootstrap: str
    dsn: str
    workdir: Path
    job: str = JOB
    replication: int = 1
    rate_per_partition: int | None = 1000
    default_partitions: int = OUTPUT_PARTITIONS
    codec: str = "utf-8"
    kafka_write_from: str = "auto"
    """The Kafka sink's `write_from`: auto writes from the driver under this local master."""
    dead_letter_topic: str | None = None
    journal_topic: str | None = None
    """Journal on this Kafka topic (replication `replication`, min ISR 2 when above 1); none:
    the file journal."""
    services: list[ServiceProcess] = field(default_factory=list)

    @property
    def input_topic(self) -> str:
        return f"{self.app_id}.lines"

    @property
    def output_topic(self) -> str:
        return f"{self.app_id}.counts"

    @property
    def journal_path(self) -> Path:
        return self.workdir / "state" / "journal"

    @property
    def files_root(self) -> Path:
        return self.workdir / "files"

    def marker_topic(self, output: str = KAFKA_OUT) -> str:
        return f"dstreams.markers.{self.app_id}.{output}"

    def create_input(self) -> None:
        create_topic(self.bootstrap, self.input_topic, INPUT_PARTITIONS, self.replication)

    def config(self, **overrides: Any) -> dict[str, Any]:
        source: dict[str, Any] = {
            "topics": [self.input_topic],
            "starting_offsets": "earliest",
            "codec": self.codec,
        }
        if self.rate_per_partition is not None:
            source["max_rate_per_partition"] = self.rate_per_partition
        config: dict[str, Any] = {
            "app_id": self.app_id,
            "job": self.job,
            "batch_interval_ms": 1000,
            "default_partitions": self.default_partitions,
            # Up to 4 attempts per task, so a dead Python worker is retried (plain local[2]
            # fails the job at once).
            "spark": {"master": "local[2,4]"},
            "kafka": {"bootstrap_servers": self.bootstrap, "require_replication": False},
            "sources": {SOURCE: source},
            "sinks": {
                KAFKA_OUT: {
                    "type": "kafka",
                    "topic": self.output_topic,
                    "replication_factor": self.replication,
                    "write_from": self.kafka_write_from,
                },
                PG_OUT: {
                    "type": "postgres",
                    "dsn": self.dsn,
                    "table": "counts",
                    "columns": ["word", "n"],
                    "column_types": {"word": "text", "n": "bigint"},
                },
                FILES_OUT: {"type": "files", "path": str(self.files_root)},
            },
            "journal": self._journal_config(),
            "logging": {"format": "json", "level": "INFO"},
        }
        if self.dead_letter_topic is not None:
            config["dead_letter"] = {
                "topic": self.dead_letter_topic,
                "replication_factor": self.replication,
            }
        config.update(overrides)
        return config

    def _journal_config(self) -> dict[str, Any]:
        if self.journal_topic is None:
            return {"type": "file", "path": str(self.journal_path)}
        return {
            "type": "kafka",
            "topic": self.journal_topic,
            "replication_factor": self.replication,
            "min_insync_replicas": min(2, self.replication),
        }

    def service(
        self,
        name: str = "driver",
        command: str = "run",
        env: dict[str, str] | None = None,
        **overrides: Any,
    ) -> ServiceProcess:
        """A process of this app (not started; `command` run or ingest; `env` added to this
        process's environment at every start); killed at teardown if still running."""
        process = ServiceProcess(
            self.config(**overrides), self.workdir, env=env, name=name, command=command
        )
        self.services.append(process)
        return process

    def kill_all(self) -> None:
        for process in self.services:
            if process.running():
                process.kill()

    # --- progress ----------------------------------------------------------------------------

    def journal_state(self) -> JournalState:
        if self.journal_topic is None:
            return JournalState.from_records(FileJournal(self.journal_path).read())
        return JournalState.from_records(self.kafka_journal_history())

    def kafka_journal_history(self) -> list[JournalRecord]:
        """Every record ever appended to the Kafka journal, snapshots left out: a reader of the
        journal starts at its latest snapshot, which compacts older batches away, but the
        verifier needs every batch the sinks may hold."""
        assert self.journal_topic is not None
        found = (decode_bytes(m.value()) for m in read_topic(self.bootstrap, self.journal_topic))
        return [r for r in found if not isinstance(r, SnapshotRecord)]

    def input_ends(self) -> dict[tuple[str, int], int]:
        consumer = _consumer(self.bootstrap, "read_uncommitted")
        try:
            return {
                (self.input_topic, p): _watermarks(consumer, self.input_topic, p)[1]
                for p in range(INPUT_PARTITIONS)
            }
        finally:
            consumer.close()

    def wait_drained(self, driver: ServiceProcess, timeout_s: float = DRAIN_TIMEOUT_S) -> None:
        """Until the journal has planned and completed everything the input topic holds."""
        ends = self.input_ends()

        def drained(_status: dict[str, Any]) -> bool:
            state = self.journal_state()
            positions = state.last_positions()
            caught_up = all(positions.get(tp, 0) >= end for tp, end in ends.items())
            return caught_up and not state.pending()

        driver.wait_for(drained, timeout_s, "every input record to be processed")

    def wait_started(self, driver: ServiceProcess, timeout_s: float = START_TIMEOUT_S) -> None:
        """Until the driver has opened the journal (its epoch is on /status): Spark is up."""
        driver.wait_for(lambda s: s.get("epoch") is not None, timeout_s, "the journal epoch")

    def wait_completed(
        self, driver: ServiceProcess, batches: int = 1, timeout_s: float = START_TIMEOUT_S
    ) -> None:
        """Until this driver process has completed `batches` new batches."""
        driver.wait_for(
            lambda s: int(s.get("totals", {}).get("completed", 0)) >= batches,
            timeout_s,
            f"{batches} completed batch(es)",
        )

    def kill_and_restart(self, driver: ServiceProcess) -> None:
        """SIGKILL, as a crash would; start again at once and wait until Spark is up."""
        assert driver.kill() == -9, driver.log_tail()
        driver.start()
        self.wait_started(driver)

    def stop(self, driver: ServiceProcess) -> None:
        """Graceful stop (SIGTERM); the driver must exit 0."""
        code = driver.terminate()
        assert code == 0, f"expected a graceful stop with exit 0, got {code}\n{driver.log_tail()}"

    # --- verification ------------------------------------------------------------------------

    def verify(self, expected: Counter[str], outputs: tuple[str, ...] = OUTPUTS) -> SinkReport:
        """Reads every sink back and asserts exactly `expected` per word, markers once each."""
        report = SinkReport()
        state = self.journal_state()
        state.validate()
        audit = audit_journal(state)  # what `dstreams audit` checks of the journal
        assert audit.ok, [v.message for v in audit.violations]
        pending = [record.batch_time for record in state.pending()]
        assert not pending, f"batches still pending: {pending}"
        # Batches with input: each wrote every partition of every output (empty ones wrote none).
        journal_batches = {
            t
            for t, record in state.planned.items()
            if t in state.completed and any(r.count for r in record.ranges)
        }
        assert journal_batches, "the journal holds no completed batch with input"
        report.journal_batches = journal_batches
        self._audit_outputs(state, outputs)
        if KAFKA_OUT in outputs:
            report.kafka = self._verify_kafka(expected, journal_batches)
        if PG_OUT in outputs:
            report.postgres = self._verify_postgres(expected, journal_batches)
        if FILES_OUT in outputs:
            report.files = self._verify_files(expected, journal_batches)
        return report

    def _audit_outputs(self, state: JournalState, outputs: tuple[str, ...]) -> None:
        """What `dstreams audit --config` checks of the Kafka and PostgreSQL outputs and the
        dead letters, from the journal the verifier read (every batch, snapshots left out)."""
        audited = [
            check
            for check in check_outputs(self.audit_settings(), state)
            if check.output in outputs and check.output != FILES_OUT or check.kind == "dead-letters"
        ]
        assert all(check.checked for check in audited), audited
        violations = [v.message for check in audited for v in check.violations]
        assert not violations, violations

    def audit_settings(self) -> Settings:
        """The last driver's settings, with the harness's PLAINTEXT access to Kafka (a secured
        test's service user may not read its own output topic back)."""
        config = self.config()
        if self.services:
            config = yaml.safe_load(self.services[-1].config_path.read_text())
        config["kafka"] = {"bootstrap_servers": self.bootstrap, "require_replication": False}
        return Settings.model_validate(config)

    def _verify_kafka(self, expected: Counter[str], batches: set[int]) -> Counter[str]:
        totals: Counter[str] = Counter()
        for message in read_topic(self.bootstrap, self.output_topic):
            totals[message.key().decode()] += int(message.value())
        assert_same_totals("Kafka", totals, expected)
        markers = Counter(
            (int(m["batch_time"]), int(m["partition"]))
            for m in (_json(msg.value()) for msg in read_topic(self.bootstrap, self.marker_topic()))
        )
        assert_markers_once("Kafka marker topic", markers, batches, OUTPUT_PARTITIONS)
        for topic in (self.output_topic, self.marker_topic()):
            assert_no_open_transactions(self.bootstrap, topic)
        return totals

    def _verify_postgres(self, expected: Counter[str], batches: set[int]) -> Counter[str]:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            rows = conn.execute("SELECT word, sum(n) FROM counts GROUP BY word").fetchall()
            totals = Counter({str(word): int(n) for word, n in rows})
            marker_rows = conn.execute(
                "SELECT batch_time, partition, count(*) FROM dstreams_batches "
                "WHERE app = %s AND output = %s GROUP BY 1, 2",
                (self.app_id, PG_OUT),
            ).fetchall()
            open_sessions = conn.execute(
                "SELECT pid, application_name, state, query FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid() "
                "AND state LIKE 'idle in transaction%%'"
            ).fetchall()
        assert_same_totals("PostgreSQL", totals, expected)
        markers = Counter({(int(t), int(p)): int(n) for t, p, n in marker_rows})
        assert_markers_once("PostgreSQL marker table", markers, batches, OUTPUT_PARTITIONS)
        assert not open_sessions, f"sessions left idle in transaction: {open_sessions}"
        return totals

    def _verify_files(self, expected: Counter[str], batches: set[int]) -> Counter[str]:
        sink = FileSink(self.files_root)
        totals: Counter[str] = Counter()
        parts: Counter[tuple[int, int]] = Counter()
        committed = sink.committed_batches(FILES_OUT)
        for batch_time in committed:
            for word, n in sink.read_batch(FILES_OUT, batch_time):
                totals[word] += n
            for part in sink.batch_dir(FILES_OUT, batch_time).glob("part-*.jsonl"):
                parts[(batch_time, int(part.stem.split("-")[1]))] += 1
        uncommitted = [
            d.name for d in (self.files_root / FILES_OUT).glob("t=*") if not (d / SUCCESS).exists()
        ]
        assert not uncommitted, f"files sink: batch folders without {SUCCESS}: {uncommitted}"
        audited = check_file_output(sink, FILES_OUT, sorted(batches))  # as `dstreams audit` does
        assert not audited, [v.message for v in audited]
        assert_same_totals("files", totals, expected)
        assert_markers_once("files part files", parts, batches, OUTPUT_PARTITIONS)
        return totals


@dataclass
class SinkReport:
    journal_batches: set[int] = field(default_factory=set)
    kafka: Counter[str] | None = None
    postgres: Counter[str] | None = None
    files: Counter[str] | None = None


# --- checks ----------------------------------------------------------------------------------


def assert_same_totals(sink: str, found: Counter[str], expected: Counter[str]) -> None:
    if found == expected:
        return
    words = sorted(set(found) | set(expected))
    wrong = [(w, found.get(w, 0), expected.get(w, 0)) for w in words if found[w] != expected[w]]
    extra = sum(max(0, f - e) for _, f, e in wrong)
    missing = sum(max(0, e - f) for _, f, e in wrong)
    msg = (
        f"{sink} sink: {len(wrong)} of {len(words)} words have wrong totals "
        f"({extra} counted too often, {missing} missing; total found {sum(found.values())}, "
        f"expected {sum(expected.values())}); first (word, found, expected): {wrong[:10]}"
    )
    raise AssertionError(msg)


def assert_markers_once(
    where: str, markers: Counter[tuple[int, int]], batches: set[int], partitions: int
) -> None:
    """Every (batch, partition) of the journal's non-empty completed batches, exactly once."""
    wanted = {(t, p) for t in batches for p in range(partitions)}
    twice = sorted(k for k, n in markers.items() if n > 1)
    missing = sorted(wanted - set(markers))
    unexpected = sorted(set(markers) - wanted)
    assert not (twice or missing or unexpected), (
        f"{where}: expected each of {len(wanted)} (batch, partition) markers once; "
        f"more than once: {twice[:10]}, missing: {missing[:10]}, not journaled: {unexpected[:10]}"
    )


def assert_no_open_transactions(bootstrap: str, topic: str) -> None:
    """Per partition, the last stable offset (read_committed high mark) equals the high mark."""
    committed = _consumer(bootstrap, "read_committed")
    uncommitted = _consumer(bootstrap, "read_uncommitted")
    try:
        open_at = {}
        for p in _partitions(committed, topic):
            lso = _watermarks(committed, topic, p)[1]
            hwm = _watermarks(uncommitted, topic, p)[1]
            if lso != hwm:
                open_at[p] = (lso, hwm)
        assert not open_at, f"{topic}: open transactions, partition -> (LSO, HWM): {open_at}"
    finally:
        committed.close()
        uncommitted.close()


# --- Kafka reading ---------------------------------------------------------------------------


def _consumer(bootstrap: str, isolation: str) -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"chaos-verifier-{uuid.uuid4().hex[:8]}",
            "isolation.level": isolation,
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "auto.offset.reset": "earliest",
            "fetch.wait.max.ms": 50,
        }
    )


# Right after a broker restart a leader may answer OFFSET_NOT_AVAILABLE ("high watermark is not
# caught up") or NOT_LEADER for a while; the verifier waits that out like a client would.
WATERMARK_WAIT_S = 60.0


def _partitions(consumer: Consumer, topic: str) -> list[int]:
    deadline = time.monotonic() + WATERMARK_WAIT_S
    metadata = consumer.list_topics(topic, timeout=30).topics[topic]
    while metadata.error is not None and metadata.error.retriable():
        assert time.monotonic() < deadline, f"topic {topic}: {metadata.error}"
        time.sleep(0.5)
        metadata = consumer.list_topics(topic, timeout=30).topics[topic]
    assert metadata.error is None, f"topic {topic}: {metadata.error}"
    return sorted(metadata.partitions)


def _watermarks(consumer: Consumer, topic: str, partition: int) -> tuple[int, int]:
    deadline = time.monotonic() + WATERMARK_WAIT_S
    return end_offsets(consumer, TopicPartition(topic, partition), deadline)


def read_topic(bootstrap: str, topic: str, isolation: str = "read_committed") -> list[Any]:
    """Every record of `topic` visible at `isolation`, partition by partition, in offset order."""
    consumer = _consumer(bootstrap, isolation)
    try:
        ends = {p: _watermarks(consumer, topic, p)[1] for p in _partitions(consumer, topic)}
        pending = {p for p, end in ends.items() if end > 0}
        if not pending:
            return []
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in pending])
        records: list[Any] = []
        deadline = time.monotonic() + 120
        while pending:
            assert time.monotonic() < deadline, f"reading {topic} did not reach its end"
            message = consumer.poll(1.0)
            if message is None:
                continue
            error = message.error()
            if error is None:
                records.append(message)
                if message.offset() + 1 >= ends[message.partition()]:
                    pending.discard(message.partition())
            elif error.code() == KafkaError._PARTITION_EOF:  # noqa: SLF001 - public error code
                pending.discard(message.partition())
            elif error.fatal():
                msg = f"reading {topic}: {error}"
                raise AssertionError(msg)
            # Other errors are reports (a broker going away); the consumer carries on by itself.
        return records
    finally:
        consumer.close()


def _json(value: bytes) -> dict[str, Any]:
    import json

    return dict(json.loads(value))


# --- service observations ------------------------------------------------------------------------


_SAMPLE = re.compile(r"^(?P<name>[a-zA-Z_:][\w:]*)(\{(?P<labels>[^}]*)\})?\s+(?P<value>\S+)$")


def metric(driver: ServiceProcess, name: str, **labels: str) -> float | None:
    """The sum of `name`'s samples whose labels include `labels`, from /metrics; None if down."""
    body = driver.get("/metrics")
    if body is None:
        return None
    total = 0.0
    for line in body.decode().splitlines():
        match = _SAMPLE.match(line)
        if match is None or match["name"] != name:
            continue
        found = dict(re.findall(r'(\w+)="([^"]*)"', match["labels"] or ""))
        if all(found.get(k) == v for k, v in labels.items()):
            total += float(match["value"])
    return total


def log_text(driver: ServiceProcess) -> str:
    return driver.log_path.read_text(errors="replace") if driver.log_path.exists() else ""


def wait_until(condition: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.25)
    msg = f"timed out after {timeout_s}s waiting for {what}"
    raise AssertionError(msg)


# --- fixtures ------------------------------------------------------------------------------------


@pytest.fixture
def pg_database(postgres_dsn: str, unique_name: str) -> Iterator[str]:
    """A database of its own for the test (markers, tables and sessions isolated); dropped after."""
    name = f"chaos_{_app_id(unique_name)}"
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    yield make_conninfo(postgres_dsn, dbname=name)
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )


def _app_id(unique_name: str) -> str:
    # Short (it names topics, transactional ids and markers) but recognisable: the test's name
    # without "test_", cut, then unique_name's random suffix.
    base, _, suffix = unique_name.removeprefix("test_").rpartition("_")
    return f"{base[:20].strip('_')}_{suffix}"


@pytest.fixture
def chaos_app(
    kafka_bootstrap: str, pg_database: str, unique_name: str, tmp_path: Path
) -> Iterator[ChaosApp]:
    """The three-sink word-count app on the session's 1-broker Kafka, input topic created."""
    app = ChaosApp(_app_id(unique_name), kafka_bootstrap, pg_database, tmp_path)
    app.create_input()
    try:
        yield app
    finally:
        app.kill_all()


ChaosAppFactory = Callable[..., ChaosApp]


@pytest.fixture
def make_chaos_app(
    postgres_dsn: str, unique_name: str, tmp_path: Path
) -> Iterator[ChaosAppFactory]:
    """`make_chaos_app(bootstrap, suffix, **fields)`: more apps (other jobs, other clusters)."""
    apps: list[ChaosApp] = []
    databases: list[str] = []

    def make(bootstrap: str, suffix: str, **fields: Any) -> ChaosApp:
        app_id = f"{_app_id(unique_name)}_{suffix}"
        name = f"chaos_{app_id}"
        with psycopg.connect(postgres_dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        databases.append(name)
        dsn = make_conninfo(postgres_dsn, dbname=name)
        app = ChaosApp(app_id, bootstrap, dsn, tmp_path / suffix, **fields)
        app.create_input()
        apps.append(app)
        return app

    try:
        yield make
    finally:
        for app in apps:
            app.kill_all()
        with psycopg.connect(postgres_dsn, autocommit=True) as conn:
            for name in databases:
                drop = sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)")
                conn.execute(drop.format(sql.Identifier(name)))
