"""Avro through a real broker: the Kafka sink writes it, the reader decodes it, in both framings.

The registry path uses confluent-kafka's in-process `mock://` registry (no Confluent-API registry
can be installed here from the reachable package registries; see the README), so writer and
reader run in this process and share its client. The file path (.avsc, plain Avro binary) also
runs end to end through `dstreams run`, whose Spark workers decode the records.
"""

from __future__ import annotations

import json
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from connectors.avro import AvroDecoder, AvroEncoder, AvroOutput, close_registries
from connectors.codecs import KeyedCodec
from connectors.offsets import OffsetRange
from connectors.reader import close_consumers, read_range
from service.dev.service_process import ServiceProcess
from sinks.base import BatchKey
from sinks.files import FileSink
from sinks.kafka import KafkaSink, close_clients

MakeTopic = Callable[..., str]
WORD = json.dumps(
    {
        "type": "record",
        "name": "Word",
        "fields": [{"name": "word", "type": "string"}, {"name": "n", "type": "long"}],
    }
)
WORD_V2 = json.dumps(
    {
        "type": "record",
        "name": "Word",
        "fields": [
            {"name": "word", "type": "string"},
            {"name": "n", "type": "long"},
            {"name": "lang", "type": "string", "default": "en"},
        ],
    }
)
RUN_TIMEOUT_S = 180


@pytest.fixture(autouse=True)
def _fresh_clients() -> Iterator[None]:
    yield
    close_consumers()
    close_clients()
    close_registries()


def produce(bootstrap: str, topic: str, values: list[bytes | None]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for value in values:
        producer.produce(topic, value, partition=0)
    assert producer.flush(30) == 0


def test_registry_round_trip_with_evolution_keys_and_every_malformed_kind(
    kafka_bootstrap: str, unique_name: str
) -> None:
    registry = {"url": f"mock://{unique_name}"}
    avro = AvroOutput(WORD, json.dumps("string"), registry, auto_register=True)
    sink = KafkaSink(
        {"bootstrap.servers": kafka_bootstrap}, f"{unique_name}_out", partitions=1, avro=avro
    )
    sink.setup("app", unique_name)
    rows = [("alpha", ("alpha", 3)), ("beta", ("beta", 1))]
    assert sink.write(BatchKey("app", unique_name, 1000, 0), rows).rows == 2
    bad = [b"\x05\x00\x00\x00\x01\x02", b"\x00\x00", b"\x00\x00\x00\x03\xe7\x02", b"\x00\x00\x00"]
    produce(kafka_bootstrap, sink.topic, list(bad))

    # Two rows and their transaction's commit marker, then the four malformed records.
    end = 7
    codec = KeyedCodec(
        AvroDecoder(registry=registry, reader_schema=WORD_V2), AvroDecoder(registry=registry)
    )
    records = list(
        read_range(
            {"bootstrap.servers": kafka_bootstrap}, OffsetRange(sink.topic, 0, 0, end), codec
        )
    )

    good = [(r.key, r.value) for r in records if r.ok]
    assert good == [
        ("alpha", {"word": "alpha", "n": 3, "lang": "en"}),
        ("beta", {"word": "beta", "n": 1, "lang": "en"}),
    ]
    failed = [(r.raw, r.error) for r in records if not r.ok]
    assert [raw for raw, _ in failed] == bad  # each once, with its original bytes
    reasons = [error or "" for _, error in failed]
    assert reasons[0].startswith("bad magic byte 5")
    assert reasons[1].startswith("truncated: 2 bytes")
    assert reasons[2].startswith("unknown schema id 999")
    assert reasons[3].startswith("truncated: 3 bytes")


def avro_config(bootstrap: str, topic: str, workdir: Path) -> dict[str, Any]:
    (workdir / "line.avsc").write_text(json.dumps("string"))
    (workdir / "count.avsc").write_text(
        json.dumps(
            {
                "type": "record",
                "name": "Count",
                "fields": [{"name": "word", "type": "string"}, {"name": "n", "type": "long"}],
            }
        )
    )
    return {
        "app_id": f"avro-{uuid.uuid4().hex[:8]}",
        "job": "examples.wordcount:build",
        "batch_interval_ms": 1000,
        "default_partitions": 2,
        "kafka": {"bootstrap_servers": bootstrap, "require_replication": False},
        "sources": {
            "lines": {
                "topics": [topic],
                "starting_offsets": "earliest",
                "codec": "avro",
                "avro": {"writer_schema": str(workdir / "line.avsc")},
            }
        },
        "sinks": {
            "counts": {
                "type": "files",
                "path": str(workdir / "out"),
                "format": "avro",
                "avro": {"schema_file": str(workdir / "count.avsc")},
            }
        },
        "journal": {"type": "file", "path": str(workdir / "journal")},
    }


def test_word_count_reads_avro_and_writes_avro_container_files(
    kafka_bootstrap: str, make_topic: MakeTopic, unique_name: str, tmp_path: Path
) -> None:
    topic = make_topic(kafka_bootstrap, unique_name)
    lines = ["alpha beta", "beta gamma", "gamma gamma alpha", "delta"] * 25
    encode = AvroEncoder(json.dumps("string"))
    produce(kafka_bootstrap, topic, [encode(line) for line in lines])
    config = avro_config(kafka_bootstrap, topic, tmp_path)

    with ServiceProcess(config, tmp_path) as service:
        service.start()
        service.wait_for(
            lambda status: status.get("totals", {}).get("records_in", 0) >= len(lines),
            RUN_TIMEOUT_S,
            "every line to be read",
        )
        assert service.terminate() == 0, service.log_tail()

    sink = FileSink(tmp_path / "out", avro_schema=(tmp_path / "count.avsc").read_text())
    totals: Counter[str] = Counter()
    for batch_time in sink.committed_batches("counts"):
        for row in sink.read_batch("counts", batch_time):
            totals[row["word"]] += row["n"]
    assert totals == Counter(word for line in lines for word in line.split())
