"""The pytest plugin's real path: a job run as the service on the session's Kafka and
PostgreSQL (`job_service`), its input produced and its outputs read as each sink committed them."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from service.dev.brokers import create_topic
from service.testing.outputs import produce, read_output, wait_for_rows

LINES = ["the cat", "the hat", "a cat in a hat", "the end"]
# The service starts Spark, plans and commits a few 1 s batches: well within this.
OUTPUT_TIMEOUT_S = 180


def totals(rows: Iterable[Any]) -> Counter[str]:
    """Word totals over every batch's (word, count) rows, whatever sequence type holds them."""
    found: Counter[str] = Counter()
    for word, count in rows:
        found[word] += count
    return found


def job_config(name: str, kafka: str, dsn: str, files: Path) -> dict[str, Any]:
    return {
        "app_id": name,
        "job": "examples.wordcount_all_sinks:build",
        "default_partitions": 2,
        "kafka": {"bootstrap_servers": kafka, "require_replication": False},
        "sources": {
            "lines": {"topics": [f"{name}_lines"], "starting_offsets": "earliest", "codec": "utf-8"}
        },
        "sinks": {
            "counts_kafka": {"type": "kafka", "topic": f"{name}_counts"},
            "counts_pg": {
                "type": "postgres",
                "dsn": dsn,
                "table": name,
                "columns": ["word", "n"],
                "column_types": {"word": "text", "n": "bigint"},
            },
            "counts_files": {"type": "files", "path": str(files)},
        },
        "journal": {"type": "file", "path": str(files.parent / "journal")},
    }


def test_a_job_as_the_service_writes_kafka_postgresql_and_files_once(
    kafka_bootstrap: str,
    postgres_dsn: str,
    job_service: Callable[..., Any],
    unique_name: str,
    tmp_path: Path,
) -> None:
    config = job_config(unique_name, kafka_bootstrap, postgres_dsn, tmp_path / "out")
    create_topic(kafka_bootstrap, f"{unique_name}_lines", partitions=2)
    produce(kafka_bootstrap, f"{unique_name}_lines", LINES[:2], partition=0)
    produce(kafka_bootstrap, f"{unique_name}_lines", LINES[2:], partition=1)
    expected = Counter(word for line in LINES for word in line.split())

    service = job_service(config)

    # Each sink, read as it committed, comes to hold every word exactly once (a duplicated or
    # missing batch never would, and the wait fails naming what it last read).
    for output in ("counts_pg", "counts_kafka", "counts_files"):

        def read(output: str = output) -> list[Any]:
            assert service.running(), f"the service stopped:\n{service.log_tail()}"
            return read_output(config, output)

        try:
            wait_for_rows(
                read,
                lambda rows: totals(rows) == expected,
                OUTPUT_TIMEOUT_S,
                f"{output} to hold every word once",
            )
        except AssertionError as error:
            msg = f"{error}\nthe service's log:\n{service.log_tail()}"
            raise AssertionError(msg) from None
