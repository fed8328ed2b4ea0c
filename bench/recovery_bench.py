"""Driver recovery time, cold and warm: SIGKILL the driver during a steady stream and time the
way back.

The chaos tier's job (`examples.wordcount_all_sinks`: Kafka, PostgreSQL and files sinks, file
journal, `local[2,4]`) runs as a `dstreams run` subprocess on a local Kafka and PostgreSQL while
a producer writes a steady stream of lines. Each of five times (after a seeded random 5-10 s of
steady work) the driver is SIGKILLed and started again at once, as a supervisor would. Per kill
it prints, read from the new driver's `/status` and `/metrics`:

- seconds from SIGKILL until the HTTP endpoint answers, until Spark is up and the new epoch is
  taken (`/status` shows it), until recovery (replay included) is done, until the first batch is
  finished (replayed or new), and until the next new batch completes;
- the batches replayed (from the driver's "recovered: ... N batches replayed" log line; the same
  figure feeds `dstreams_replayed_batches_total`).

That is the cold case. The warm case runs two `dstreams run --standby` drivers (see
`service.driver.election`; the file journal elects by a lock beside it, the Kafka journal with
`--journal kafka` by a consumer group on its topic, with a 2 s session timeout): each time the
active one is SIGKILLed the waiting standby takes over, and the killed one is started again as
the next standby (and is given time to warm up before the next kill).

Then `recovery: cold median X s, warm median Y s` of "SIGKILL to next completed batch" against
the targets (cold 7 s, warm 3 s).

Down time (`downtime`): a driver whose last batch is `--down-s` (an hour) old catches up one batch
per interval of its down time (docs/architecture.md, Recovery). Its journal is written by
`service.testing.outage.journal_outage` (no input arrived during the outage: no backlog); the driver
then runs the real recovery and catch-up. Timed from the "recovered" log line until a completed
batch is at least as late as the wall clock was then, for a stateless graph
(`examples.wordcount_all_sinks`, Kafka, PostgreSQL and files) and a windowed one
(`examples.sliding_counts`, 30 s windows every 10 s to files, whose last batch read 2,000
lines, so the first windows of the down time hold them), `--outages` times each; printed as
`catch-up: <graph> median X s per hour of down time` against the targets (60 s, 120 s).

First, start-up: as many fresh drivers as kills (each with its own app id and journal, reading
the steady stream from its end), each timed from process start to its first completed batch,
printed as `start-up to first batch: median X s` (target 3 s).
Not a test: it prints figures and asserts nothing.
`KAFKA_BOOTSTRAP_SERVERS` / `POSTGRES_DSN` name existing servers; otherwise local ones are
started (and stopped) by this script.
Usage: python bench/recovery_bench.py [--kills 5] [--seed N] [--journal file|kafka]
    [--only cold|warm|startup|downtime] [--outages 3] [--down-s 3600] [--keep-log FILE]
"""

from __future__ import annotations

import argparse
import random
import re
import statistics
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from connectors.offsets import OffsetRange  # noqa: E402
from service.config.settings import load_settings  # noqa: E402
from service.dev.brokers import kafka_endpoint  # noqa: E402
from service.dev.postgres_server import postgres_endpoint  # noqa: E402
from service.dev.service_process import ServiceProcess  # noqa: E402
from service.testing.outage import journal_outage  # noqa: E402

PARTITIONS = 4
LINES_PER_SECOND = 2_000  # steady input, well under the job's capacity
RATE_PER_PARTITION = 2_000  # catch-up after a kill: up to 8,000 lines per 1 s batch
TARGET_COLD_S = 7.0
TARGET_WARM_S = 3.0
TARGET_STARTUP_S = 3.0
SESSION_MS = 2_000
STANDBY_WAITING = "standby: waiting to become the active driver"
POLL_S = 0.05
# A restart takes ~10-20 s here; anything near this limit means the driver is not recovering.
RECOVERY_TIMEOUT_S = 180.0
VOCABULARY = [f"w{i:03d}" for i in range(400)]
TARGET_CATCH_UP_S = {"stateless": 60.0, "windowed": 120.0}  # per hour of down time
WINDOWED_LINES = 2_000


@dataclass
class Recovery:
    kill: int
    http_s: float
    spark_s: float
    recovered_s: float
    first_batch_s: float
    next_completed_s: float
    replayed: int


def new_database(dsn: str, name: str) -> str:
    import psycopg
    from psycopg import sql
    from psycopg.conninfo import make_conninfo

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    return make_conninfo(dsn, dbname=name)


def job_config(app: str, bootstrap: str, dsn: str, workdir: Path, journal: str) -> dict[str, Any]:
    journals = {
        "file": {"type": "file", "path": str(workdir / "state" / "journal")},
        "kafka": {"type": "kafka", "topic": f"{app}.journal"},
    }
    return {
        "app_id": app,
        "job": "examples.wordcount_all_sinks:build",
        "batch_interval_ms": 1000,
        "default_partitions": 4,
        "spark": {"master": "local[2,4]"},
        "kafka": {"bootstrap_servers": bootstrap, "require_replication": False},
        "sources": {
            "lines": {
                "topics": [f"{app}.lines"],
                "starting_offsets": "earliest",
                "codec": "utf-8",
                "max_rate_per_partition": RATE_PER_PARTITION,
            }
        },
        "sinks": {
            "counts_kafka": {"type": "kafka", "topic": f"{app}.counts"},
            "counts_pg": {
                "type": "postgres",
                "dsn": dsn,
                "table": "counts",
                "columns": ["word", "n"],
                "column_types": {"word": "text", "n": "bigint"},
            },
            "counts_files": {"type": "files", "path": str(workdir / "files")},
        },
        "journal": journals[journal],
        "logging": {"format": "json", "level": "INFO"},
    }


class SteadyStream(threading.Thread):
    """Produces about `LINES_PER_SECOND` lines/s until stopped."""

    def __init__(self, bootstrap: str, topic: str, seed: int) -> None:
        super().__init__(name="steady-stream", daemon=True)
        from confluent_kafka import Producer

        self.producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20})
        self.topic = topic
        self.rng = random.Random(seed)
        self.stopping = threading.Event()

    def run(self) -> None:
        step = LINES_PER_SECOND // 10
        sent = 0
        while not self.stopping.wait(0.1):
            for _ in range(step):
                line = " ".join(self.rng.choices(VOCABULARY, k=self.rng.randint(1, 8)))
                self.producer.produce(self.topic, line.encode(), partition=sent % PARTITIONS)
                sent += 1
            self.producer.poll(0)
        self.producer.flush(30)


def this_start(driver: ServiceProcess) -> str:
    """The driver's log since its latest start."""
    text = driver.log_path.read_text(errors="replace")
    return text.split(f"--- start {driver.starts - 1} ---")[-1]


def recovery_line(driver: ServiceProcess) -> re.Match[str] | None:
    """This start's "recovered: ..." log line, once the driver has logged it."""
    return re.search(r"recovered: epoch \d+, (\d+) batches replayed", this_start(driver))


def measure_restart(driver: ServiceProcess, kill: int) -> Recovery:
    """Cold: SIGKILL, restart at once, and time the new driver's way back to a completed batch."""
    killed_at = time.monotonic()
    driver.kill()
    driver.start()
    return time_way_back(driver, kill, killed_at)


def measure_takeover(active: ServiceProcess, standby: ServiceProcess, kill: int) -> Recovery:
    """Warm: SIGKILL the active driver and time the waiting standby's way to a completed batch."""
    killed_at = time.monotonic()
    active.kill()
    return time_way_back(standby, kill, killed_at)


def time_way_back(driver: ServiceProcess, kill: int, killed_at: float) -> Recovery:
    marks: dict[str, float] = {}
    deadline = killed_at + RECOVERY_TIMEOUT_S
    replayed = -1
    while "completed" not in marks:
        if time.monotonic() > deadline or not driver.running():
            msg = f"kill {kill}: no completed batch within {RECOVERY_TIMEOUT_S}s\n"
            raise RuntimeError(msg + driver.log_tail())
        status = driver.status()
        now = time.monotonic() - killed_at
        if status is not None:
            marks.setdefault("http", now)
            if status.get("epoch") is not None:
                marks.setdefault("epoch", now)
            if "recovered" not in marks and (line := recovery_line(driver)) is not None:
                marks["recovered"], replayed = now, int(line.group(1))
            outcomes = [b.get("outcome") for b in status.get("batches", [])]
            if any(o in ("completed", "replayed") for o in outcomes):
                marks.setdefault("first", now)
            if "completed" in outcomes:
                marks["completed"] = now
        time.sleep(POLL_S)
    done = marks["completed"]
    return Recovery(
        kill,
        marks["http"],
        marks.get("epoch", done),
        marks.get("recovered", done),
        marks.get("first", done),
        done,
        replayed,
    )


def wait_until_standing_by(driver: ServiceProcess) -> None:
    """Until `driver` (started with standby on) has Spark warm and waits to be elected."""
    deadline = time.monotonic() + RECOVERY_TIMEOUT_S
    while STANDBY_WAITING not in this_start(driver):
        if time.monotonic() > deadline or not driver.running():
            msg = f"the standby did not start waiting within {RECOVERY_TIMEOUT_S}s\n"
            raise RuntimeError(msg + driver.log_tail())
        time.sleep(POLL_S)


def wait_for_batches(driver: ServiceProcess, count: int) -> None:
    driver.wait_for(
        lambda s: int(s.get("totals", {}).get("completed", 0)) >= count,
        RECOVERY_TIMEOUT_S,
        f"{count} completed batches",
    )


def run_startup(bootstrap: str, dsn: str, app: str, workdir: Path, starts: int) -> list[Recovery]:
    """Start-up: `starts` fresh drivers (each its own app id, journal and database, reading the
    steady stream from its end), each timed from process start to its first completed batch."""
    print("start-up: fresh drivers (new app id and journal), each to its first batch", flush=True)
    results: list[Recovery] = []
    for start in range(1, starts + 1):
        fresh_app = f"{app}_{start}"
        folder = workdir / fresh_app
        config = job_config(fresh_app, bootstrap, new_database(dsn, fresh_app), folder, "file")
        config["sources"]["lines"].update(topics=[f"{app}.lines"], starting_offsets="latest")
        driver = ServiceProcess(config, folder, name="fresh")
        started_at = time.monotonic()
        driver.start()
        try:
            results.append(time_way_back(driver, start, started_at))
        finally:
            driver.kill()
        print_row(results[-1], "start")
    return results


def run(
    kills: int,
    seed: int,
    journal: str,
    cases: tuple[str, ...],
    keep_log: Path | None = None,
    outage: tuple[int, float] = (3, 3600.0),
) -> tuple[dict[str, list[Recovery]], dict[str, list[float]]]:
    """The cases' recoveries, and `downtime`'s catch-up seconds per hour by graph."""
    from service.dev.brokers import create_topic

    rng = random.Random(seed)
    results: dict[str, list[Recovery]] = {}
    catch_ups: dict[str, list[float]] = {}
    with kafka_endpoint(brokers=1) as bootstrap, postgres_endpoint() as dsn:
        for case in cases:
            if case == "downtime":
                catch_ups = run_downtime(bootstrap, dsn, *outage, journal)
                continue
            app = f"recovery_bench_{case}_{uuid.uuid4().hex[:6]}"
            with tempfile.TemporaryDirectory() as tmp:
                workdir = Path(tmp)
                create_topic(bootstrap, f"{app}.lines", partitions=PARTITIONS)
                config = job_config(app, bootstrap, new_database(dsn, app), workdir, journal)
                stream = SteadyStream(bootstrap, f"{app}.lines", seed)
                stream.start()
                try:
                    if case == "startup":
                        results[case] = run_startup(bootstrap, dsn, app, workdir, kills)
                        continue
                    measure = run_cold if case == "cold" else run_warm
                    results[case] = measure(config, workdir, kills, rng, keep_log)
                finally:
                    stream.stopping.set()
                    stream.join(30)
    return results, catch_ups


# --- down time ---------------------------------------------------------------------------------


def run_downtime(
    bootstrap: str, dsn: str, outages: int, down_s: float, journal: str
) -> dict[str, list[float]]:
    """Per graph, `outages` catch-ups after `down_s` of down time, in seconds per hour."""
    print(f"downtime: a driver whose last batch is {down_s:.0f} s old, catching up", flush=True)
    per_hour: dict[str, list[float]] = {}
    for graph in ("stateless", "windowed"):
        for outage in range(1, outages + 1):
            app = f"downtime_bench_{graph}_{uuid.uuid4().hex[:6]}"
            # A killed driver's Python workers may still be writing as the folder is removed.
            with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as tmp:
                folder = Path(tmp)
                config = downtime_config(app, bootstrap, dsn, folder, graph, journal)
                seconds, batches = time_catch_up(bootstrap, config, folder, graph, down_s)
            per_hour.setdefault(graph, []).append(seconds * 3600 / down_s)
            print(
                f"{graph} outage {outage}: {batches} down-time batches caught up in "
                f"{seconds:.1f} s ({per_hour[graph][-1]:.1f} s per hour of down time)",
                flush=True,
            )
    return per_hour


def downtime_config(
    app: str, bootstrap: str, dsn: str, workdir: Path, graph: str, journal: str
) -> dict[str, Any]:
    config = job_config(app, bootstrap, new_database(dsn, app), workdir, journal)
    if graph == "windowed":
        config["job"] = "examples.sliding_counts:build"
        config["sinks"] = {"window_counts": {"type": "files", "path": str(workdir / "files")}}
        config["checkpoint"] = {"path": str(workdir / "state" / "checkpoints")}
    return config


def preload(bootstrap: str, topic: str, lines: int) -> list[OffsetRange]:
    """`lines` lines spread over the partitions; the ranges that hold them."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20})
    rng = random.Random(lines)
    for n in range(lines):
        line = " ".join(rng.choices(VOCABULARY, k=rng.randint(1, 8)))
        producer.produce(topic, line.encode(), partition=n % PARTITIONS)
    producer.flush(30)
    per_partition = [len(range(p, lines, PARTITIONS)) for p in range(PARTITIONS)]
    return [OffsetRange(topic, p, 0, n) for p, n in enumerate(per_partition)]


def time_catch_up(
    bootstrap: str, config: dict[str, Any], workdir: Path, graph: str, down_s: float
) -> tuple[float, int]:
    """Seconds from the "recovered" log line until the driver runs on time, and the batches."""
    from service.dev.brokers import create_topic

    topic = f"{config['app_id']}.lines"
    create_topic(bootstrap, topic, partitions=PARTITIONS)
    lines = WINDOWED_LINES if graph == "windowed" else 0
    ranges = preload(bootstrap, topic, lines)
    driver = ServiceProcess(config, workdir)
    driver.config_path.write_text(yaml.safe_dump(driver.config))
    last = journal_outage(load_settings(driver.config_path), int(down_s * 1000), ranges)
    driver.start()
    try:
        deadline = time.monotonic() + RECOVERY_TIMEOUT_S + 2 * down_s
        while recovery_line(driver) is None:
            if time.monotonic() > deadline or not driver.running():
                raise RuntimeError("the driver did not recover\n" + driver.log_tail())
            time.sleep(POLL_S)
        recovered, now_ms = time.monotonic(), int(time.time() * 1000)
        while (latest := latest_completed(driver)) < now_ms:
            if time.monotonic() > deadline or not driver.running():
                raise RuntimeError("the driver did not catch up\n" + driver.log_tail())
            time.sleep(POLL_S)
        return time.monotonic() - recovered, (latest - last) // 1000
    finally:
        driver.kill()


def latest_completed(driver: ServiceProcess) -> int:
    """The latest batch time `/status` shows completed (0 before any)."""
    batches = (driver.status() or {}).get("batches", [])
    done = [int(b["batch_time"]) for b in batches if b.get("outcome") == "completed"]
    return max(done, default=0)


def run_cold(
    config: dict[str, Any], workdir: Path, kills: int, rng: random.Random, keep_log: Path | None
) -> list[Recovery]:
    print("cold: one driver, SIGKILLed and started again at once", flush=True)
    driver = ServiceProcess(config, workdir, name="driver")
    results: list[Recovery] = []
    try:
        driver.start()
        wait_for_batches(driver, 3)
        for kill in range(1, kills + 1):
            time.sleep(rng.uniform(5.0, 10.0))
            results.append(measure_restart(driver, kill))
            print_row(results[-1])
    finally:
        driver.kill()
        if keep_log is not None:
            keep_log.write_bytes(driver.log_path.read_bytes())
    return results


def run_warm(
    config: dict[str, Any], workdir: Path, kills: int, rng: random.Random, keep_log: Path | None
) -> list[Recovery]:
    print("warm: two drivers with --standby; the killed one comes back as the standby", flush=True)
    # Kafka journal: a killed driver's group member (a process of its own) leaves the group at
    # once; the session timeout bounds only a paused driver or a lost host. The file journal's
    # lock is released at once.
    standby_config = {**config, "standby": {"enabled": True, "session_timeout_ms": SESSION_MS}}
    active = ServiceProcess(standby_config, workdir, name="driver-a")
    standby = ServiceProcess(standby_config, workdir, name="driver-b")
    results: list[Recovery] = []
    try:
        active.start()
        wait_for_batches(active, 3)
        standby.start()
        for kill in range(1, kills + 1):
            wait_until_standing_by(standby)
            time.sleep(rng.uniform(5.0, 10.0))
            results.append(measure_takeover(active, standby, kill))
            print_row(results[-1])
            active, standby = standby, active
            standby.start()
    finally:
        active.kill()
        standby.kill()
        if keep_log is not None:
            keep_log.write_bytes(active.log_path.read_bytes() + standby.log_path.read_bytes())
    return results


def print_row(r: Recovery, event: str = "kill") -> None:
    print(
        f"{event} {r.kill}: http up {r.http_s:4.1f}s | Spark up, epoch taken {r.spark_s:4.1f}s | "
        f"recovered {r.recovered_s:4.1f}s | "
        f"first batch done {r.first_batch_s:5.1f}s | next completed batch "
        f"{r.next_completed_s:5.1f}s | batches replayed {r.replayed}",
        flush=True,
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=5)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--journal", choices=("file", "kafka"), default="file")
    parser.add_argument("--only", choices=("cold", "warm", "startup", "downtime"), default=None)
    parser.add_argument("--outages", type=int, default=3, help="down-time runs per graph")
    parser.add_argument("--down-s", type=float, default=3600.0, help="seconds of down time")
    parser.add_argument("--keep-log", type=Path, default=None, help="copy the drivers' logs here")
    args = parser.parse_args()
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(2**31)
    cases = (args.only,) if args.only else ("startup", "cold", "warm", "downtime")
    print(
        f"recovery bench: {args.kills} kills per case, seed {seed}, {LINES_PER_SECOND} lines/s "
        f"steady, {args.journal} journal"
    )
    outage = (args.outages, args.down_s)
    results, catch_ups = run(args.kills, seed, args.journal, cases, args.keep_log, outage)
    startups = results.pop("startup", None)
    medians = {
        case: statistics.median(r.next_completed_s for r in rs) for case, rs in results.items()
    }
    if startups:
        startup = statistics.median(r.first_batch_s for r in startups)
        verdict = "meets" if startup <= TARGET_STARTUP_S else "misses"
        print(
            f"start-up to first batch: median {startup:.1f} s of {len(startups)} fresh starts "
            f"({verdict} the {TARGET_STARTUP_S:.0f} s target); Spark up, epoch taken: median "
            f"{statistics.median(r.spark_s for r in startups):.1f} s"
        )
    for case, target in (("cold", TARGET_COLD_S), ("warm", TARGET_WARM_S)):
        if case in results:
            first = statistics.median(r.first_batch_s for r in results[case])
            verdict = "meets" if medians[case] <= target else "misses"
            print(
                f"{case}: median SIGKILL -> next completed batch {medians[case]:.1f}s ({verdict} "
                f"the {target:.0f}s target); -> first batch done {first:.1f}s; batches replayed "
                f"{[r.replayed for r in results[case]]}"
            )
    shown = ", ".join(f"{case} median {median:.1f} s" for case, median in medians.items())
    if shown:
        print(f"recovery: {shown}")
    for graph, figures in catch_ups.items():
        median = statistics.median(figures)
        target = TARGET_CATCH_UP_S[graph]
        verdict = "meets" if median <= target else "misses"
        print(
            f"catch-up: {graph} median {median:.1f} s per hour of down time ({verdict} the "
            f"{target:.0f} s target; runs {[round(f, 1) for f in figures]})"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
