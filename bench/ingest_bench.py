"""Ingest throughput and acknowledgement latency: `dstreams ingest` against a plain producer.

Both write the same records (JSON lines of about 100 bytes) to their own topic (4 partitions,
replication factor 3, min.insync.replicas 2) on a local 3-broker cluster, in the same run and in
the same shape: `--clients` concurrent senders, each sending `--batch` records and waiting until
all of them are acknowledged before sending the next batch.

- baseline: one confluent-kafka producer shared by the senders, with the endpoint's producer
  settings (acks=all, idempotence, the same linger.ms), no transactions, no HTTP;
- dstreams ingest: the endpoint as its own process (`dstreams ingest`); each batch is one
  POST /ingest/<source> with an Idempotency-Key, acknowledged (200) once the in-sync replicas
  have every record (group-committed Kafka transactions, see service/ingest/writer.py).

Each side is first warmed until its rate is steady, then measured over rounds of `--records` for
at least MEASURED_S. Prints records/s and p50/p99 acknowledgement latency per batch for each, the
CPU each role (brokers, endpoint, senders) spent per 1,000 records, and the ratios; then the
endpoint's p50/p99 with its senders paced at half the rate it just sustained (latency counted from
when each batch was due), the latency clients see below saturation.
Usage: python bench/ingest_bench.py [--records N] [--batch B] [--clients C]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.cpu_use import cpu_by_role, spent  # noqa: E402
from service.dev.ingest_client import IngestClient  # noqa: E402

PARTITIONS = 4
LINGER_MS = 5  # the ingest endpoint's default (ingest.linger_ms)
# Warm-up: rounds of WARM_UP_BATCHES batches for at least WARM_UP_S, then until a round is within
# WARM_ENOUGH of the one before (at most MAX_WARM_UP_ROUNDS more). The brokers' JIT compiles a
# code path only after many runs, and the transactional ones (AddPartitionsToTxn, EndTxn,
# markers) are not run by the cluster's start or the baseline: under the endpoint's load the
# brokers' CPU per 1,000 records fell from 42 ms in the first round to 5 ms after about 80 s,
# and the rate rose all that time by steps that two rounds in a row did not show; the plain
# producer's went from 65,000 to about 350,000 records/s over its 90 s. Cold is a JVM's first
# minutes, not what either pays while it serves; both sides get the same.
WARM_UP_BATCHES = 200
WARM_UP_S = 90.0
WARM_ENOUGH = 0.1
MAX_WARM_UP_ROUNDS = 8
IDLE_S = 3.0
MEASURED_S = 8.0


def make_batches(records: int, batch: int) -> list[bytes]:
    """Newline-delimited JSON bodies of `batch` records each (~100 bytes a record)."""
    padding = "x" * 70
    lines = [json.dumps({"id": i, "payload": padding}).encode() for i in range(records)]
    return [b"\n".join(lines[i : i + batch]) + b"\n" for i in range(0, records, batch)]


def run_senders(
    batches: list[bytes],
    clients: int,
    send: Callable[[int, int, bytes], None],
    interval_s: float = 0.0,
) -> Any:
    """`clients` threads take batches in turn and call `send(client, number, body)`, which returns
    once the batch is acknowledged. Returns (seconds, latency of each batch).

    `interval_s` > 0 paces the sends: batch n is due `n * interval_s` after the start, and its
    latency counts from when it was due (so a backlog shows in the latencies, not hidden)."""
    latencies: list[float] = []
    errors: list[BaseException] = []
    lock = threading.Lock()
    cursor = iter(range(len(batches)))

    def worker(client: int) -> None:
        while not errors:
            with lock:
                number = next(cursor, None)
            if number is None:
                return
            due = begun + number * interval_s
            time.sleep(max(0.0, due - time.perf_counter()))
            started = due if interval_s > 0 else time.perf_counter()
            try:
                send(client, number, batches[number])
            except BaseException as error:  # stops every sender; raised below
                errors.append(error)
                return
            elapsed = time.perf_counter() - started
            with lock:
                latencies.append(elapsed)

    threads = [threading.Thread(target=worker, args=(c,)) for c in range(clients)]
    started = begun = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
    return time.perf_counter() - started, latencies


# --- baseline: a plain producer -----------------------------------------------------------------


class PlainProducer:
    """One idempotent acks=all producer; `send` produces a batch and waits for all its acks."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        from confluent_kafka import Producer

        self.topic = topic
        self.producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "enable.idempotence": True,
                "acks": "all",
                "linger.ms": LINGER_MS,
                "partitioner": "murmur2_random",
            }
        )
        self.stopping = threading.Event()
        self.poller = threading.Thread(target=self._poll, daemon=True)
        self.poller.start()

    def _poll(self) -> None:
        while not self.stopping.is_set():
            self.producer.poll(0.01)

    def send(self, client: int, number: int, body: bytes) -> None:
        values = body.rstrip(b"\n").split(b"\n")
        left = [len(values)]
        done = threading.Event()
        failed: list[Any] = []

        def delivered(error: Any, message: Any) -> None:
            if error is not None:
                failed.append(error)
            left[0] -= 1
            if left[0] == 0:
                done.set()

        for value in values:
            while True:
                try:
                    self.producer.produce(self.topic, value, on_delivery=delivered)
                    break
                except BufferError:
                    time.sleep(0.001)
        if not done.wait(120) or failed:
            msg = f"baseline batch {number}: not acknowledged ({failed[:3]})"
            raise RuntimeError(msg)

    def close(self) -> None:
        self.producer.flush(30)
        self.stopping.set()
        self.poller.join()


# --- dstreams ingest ----------------------------------------------------------------------------


def start_endpoint(bootstrap: str, topic: str, workdir: Path) -> Any:
    from service.dev.service_process import ServiceProcess

    config = {
        "app_id": f"bench-ingest-{int(time.time())}",
        "job": "examples.wordcount:build",
        "kafka": {"bootstrap_servers": bootstrap, "require_replication": False},
        "sources": {"events": {"topics": [topic]}},
        "ingest": {"linger_ms": LINGER_MS},
        "logging": {"format": "json", "level": "WARNING"},
    }
    endpoint = ServiceProcess(config, workdir, name="ingest", command="ingest")
    endpoint.start()
    deadline = time.monotonic() + 120
    while endpoint.get("/readyz") is None:
        if not endpoint.running() or time.monotonic() > deadline:
            msg = f"the ingest endpoint did not become ready:\n{endpoint.log_tail()}"
            raise RuntimeError(msg)
        time.sleep(0.1)
    return endpoint


def transactions_committed(endpoint: Any) -> float:
    """The endpoint's dstreams_ingest_transactions_total."""
    from prometheus_client.parser import text_string_to_metric_families

    body = endpoint.get("/metrics") or b""
    for family in text_string_to_metric_families(body.decode()):
        if family.name == "dstreams_ingest_transactions":
            return float(
                sum(sample.value for sample in family.samples if sample.name.endswith("_total"))
            )
    msg = "the endpoint's /metrics has no dstreams_ingest_transactions_total"
    raise RuntimeError(msg)


def endpoint_sender(port: int, clients: int, prefix: str) -> Callable[[int, int, bytes], None]:
    connections = [IngestClient("127.0.0.1", port) for _ in range(clients)]

    def send(client: int, number: int, body: bytes) -> None:
        reply = connections[client].post("events", body, key=f"{prefix}-{number}")
        if reply.status != 200:
            msg = f"ingest batch {number}: answered {reply.status} {reply.body}"
            raise RuntimeError(msg)

    return send


# --- reporting ----------------------------------------------------------------------------------


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def role_of(pid: int, command_line: str) -> str:
    if pid == os.getpid():
        return "senders"
    return "brokers" if "kafka.Kafka" in command_line else "endpoint"


def report(
    name: str, records: int, seconds: float, latencies: list[float], cpu: dict[str, float]
) -> tuple[float, float]:
    rate = records / seconds
    p50, p99 = statistics.median(latencies), percentile(latencies, 0.99)
    print(
        f"{name:<44} {rate:>10,.0f} records/s   ack p50 {p50 * 1000:7.1f} ms   "
        f"p99 {p99 * 1000:7.1f} ms",
        flush=True,
    )
    # Where the cores went: on a shared 2-core machine this is what limits the rate.
    shares = ", ".join(
        f"{role} {1e6 * used / records:.0f} ms ({100 * used / seconds:.0f}%)"
        for role, used in sorted(cpu.items())
        if used > 0
    )
    print(f"{'':<44} CPU per 1,000 records: {shares}", flush=True)
    return rate, p50


def report_idle(seconds: float) -> None:
    """What each role burns with the endpoint up and nothing sent: the floor under the rates."""
    before = cpu_by_role(role_of)
    time.sleep(seconds)
    used = spent(before, cpu_by_role(role_of))
    shares = ", ".join(f"{role} {100 * cpu / seconds:.0f}%" for role, cpu in sorted(used.items()))
    print(f"{'idle (endpoint up, nothing sent)':<44} CPU: {shares}", flush=True)


def warm_up(name: str, batches: list[bytes], clients: int, send_as: Callable[[str], Any]) -> int:
    """Rounds of `batches` until the rate is steady (see WARM_UP_S); returns the rounds."""
    records = sum(body.count(b"\n") for body in batches)
    rates: list[float] = []
    warmed, steady_tries = 0.0, 0
    while warmed < WARM_UP_S or steady_tries < MAX_WARM_UP_ROUNDS:
        seconds, _ = run_senders(batches, clients, send_as(f"w{len(rates)}"))
        rates.append(records / seconds)
        warmed += seconds
        if warmed < WARM_UP_S:
            continue
        steady_tries += 1
        if len(rates) > 1 and abs(rates[-1] - rates[-2]) <= WARM_ENOUGH * rates[-2]:
            break
    # The first round and the last few: where it started and that it ended steady.
    shown = ", ".join(f"{rate / 1000:,.0f}k" for rate in rates[-5:])
    print(f"{'  warm-up of ' + name:<44} {len(rates)} rounds in {warmed:.0f} s; records/s "
          f"{rates[0] / 1000:,.0f}k first, last {shown}", flush=True)  # fmt: skip
    return len(rates)


def measured_rounds(
    batches: list[bytes], clients: int, send_as: Callable[[str], Any], prefix: str
) -> tuple[int, float, list[float], dict[str, float]]:
    """Rounds of `batches` until MEASURED_S have passed: (records, seconds, latencies, CPU).

    A round of the baseline lasts about a second, where a scheduling hiccup moves the rate by
    a third; both sides are measured over the same minimum time."""
    records_per_round = sum(body.count(b"\n") for body in batches)
    records, seconds, latencies = 0, 0.0, []
    before = cpu_by_role(role_of)
    while seconds < MEASURED_S:
        took, round_latencies = run_senders(batches, clients, send_as(f"{prefix}{records}"))
        records, seconds = records + records_per_round, seconds + took
        latencies.extend(round_latencies)
    return records, seconds, latencies, spent(before, cpu_by_role(role_of))


def measured(
    batches: list[bytes],
    clients: int,
    send: Callable[[int, int, bytes], None],
    interval_s: float = 0.0,
) -> tuple[float, list[float], dict[str, float]]:
    """`run_senders`, and the CPU each role spent meanwhile."""
    before = cpu_by_role(role_of)
    seconds, latencies = run_senders(batches, clients, send, interval_s)
    return seconds, latencies, spent(before, cpu_by_role(role_of))


def committed_count(bootstrap: str, topic: str) -> int:
    """Records visible to read_committed readers (what the driver would read)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"{topic}-count",
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
            "enable.auto.commit": False,
        }
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    count, at_end = 0, set()
    deadline = time.monotonic() + 120
    while len(at_end) < PARTITIONS and time.monotonic() < deadline:
        for message in consumer.consume(10_000, 1.0):
            if message.error() is None:
                count += 1
            else:
                at_end.add(message.partition())
    consumer.close()
    return count


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--batch", type=int, default=500, help="records per request")
    parser.add_argument("--clients", type=int, default=8, help="concurrent senders")
    args = parser.parse_args()

    from service.dev.brokers import create_topic, kafka_endpoint

    batches = make_batches(args.records, args.batch)
    warming = make_batches(WARM_UP_BATCHES * args.batch, args.batch)
    shape = f"{args.clients} senders x {args.batch}-record batches"
    with kafka_endpoint(brokers=3) as bootstrap, tempfile.TemporaryDirectory() as tmp:
        stamp = int(time.time())
        plain_topic, ingest_topic = f"bench-plain-{stamp}", f"bench-ingest-{stamp}"
        for topic in (plain_topic, ingest_topic):
            create_topic(bootstrap, topic, partitions=PARTITIONS, replication=3)
        print(f"ingest benchmark: {args.records:,} records, {shape}, RF 3, acks=all", flush=True)

        plain = PlainProducer(bootstrap, plain_topic)
        warm_up("the baseline", warming, args.clients, lambda _: plain.send)
        records, seconds, latencies, cpu = measured_rounds(
            batches, args.clients, lambda _: plain.send, "m"
        )
        plain.close()
        base_rate, base_p50 = report("baseline (confluent-kafka, acks=all)", records,
                                     seconds, latencies, cpu)  # fmt: skip

        endpoint = start_endpoint(bootstrap, ingest_topic, Path(tmp))
        try:
            port, clients = endpoint.port, args.clients
            rounds = warm_up("the endpoint", warming, clients,
                             lambda prefix: endpoint_sender(port, clients, prefix))  # fmt: skip
            report_idle(IDLE_S)
            transactions = transactions_committed(endpoint)
            records, seconds, latencies, cpu = measured_rounds(
                batches, clients, lambda prefix: endpoint_sender(port, clients, prefix), "m"
            )
            transactions = transactions_committed(endpoint) - transactions
            rate, p50 = report("dstreams ingest (HTTP, transactions, keys)", records,
                               seconds, latencies, cpu)  # fmt: skip
            print(f"{'':<44} {records / transactions:,.0f} records per transaction "
                  f"({transactions:,.0f} transactions)", flush=True)  # fmt: skip
            sent = rounds * len(warming) * args.batch + records
            # Acknowledgement latency where it matters: at half the rate it can sustain.
            half = endpoint_sender(endpoint.port, args.clients, "h")
            interval = args.batch / (rate / 2)
            paced = make_batches(args.records // 2, args.batch)
            seconds, latencies, cpu = measured(paced, args.clients, half, interval)
            report(f"dstreams ingest at half rate ({rate / 2:,.0f}/s)", len(paced) * args.batch,
                   seconds, latencies, cpu)  # fmt: skip
        except BaseException:
            print(f"the endpoint's log ends:\n{endpoint.log_tail()}", file=sys.stderr)
            raise
        finally:
            endpoint.terminate()
        written = committed_count(bootstrap, ingest_topic)
    print(
        f"ratio ingest / baseline: records/s {rate / base_rate:.2f}, ack p50 {p50 / base_p50:.1f}x"
    )
    exact = written == sent + len(paced) * args.batch
    print(f"every acknowledged record in the topic once: {exact} ({written:,} read_committed)")
    return 0 if exact else 1


if __name__ == "__main__":
    sys.exit(main())
