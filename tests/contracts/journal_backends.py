"""One adapter per journal backend for the journal contract suite (`test_journal_contract.py`).

An adapter makes journals of one store unique to the test (a file, a topic and app id), can
simulate a driver that dies in the middle of an append, shows its own evidence that compaction
happened, and names the store for the `dstreams journal` CLI. Everything else is the contract's.

To give a new journal backend the suite: write an adapter class here and add one `pytest.param`
line for it to `JOURNAL_BACKENDS`, with the tier mark of what it needs. Besides the
`JournalBackend` methods, the class has ``start(request, name, folder)``, which returns the
adapter for one test (`name` unique to the test, `folder` its temporary directory; servers come
from the session fixtures through ``request.getfixturevalue``).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, ClassVar, Protocol

import pytest
from confluent_kafka.admin import AdminClient

from service.journal.base import Journal
from service.journal.file import FileJournal, encode_frame
from service.journal.kafka import PARTITION, KafkaJournal
from service.journal.records import JournalRecord, SnapshotRecord, encode_bytes


class JournalBackend(Protocol):
    """What the contract needs from one backend."""

    # A pattern the backend's `FencedOut` message matches: it names the fenced epoch.
    fenced_says: ClassVar[str]
    # Whether reads return every epoch record ever appended, or (a backend that compacts on
    # open) only the latest.
    reads_every_epoch: ClassVar[bool]

    def make(self, *, owner: str | None = None, compacting: bool = False) -> Journal:
        """A new, unopened journal object on this test's store. `compacting` makes it compact
        (or snapshot) after a few records instead of after thousands."""
        ...

    def exists(self) -> bool:
        """Whether the store (file, topic) exists."""
        ...

    def die_mid_append(self, journal: Journal, record: JournalRecord) -> None:
        """Leave what a driver holding `journal` leaves when it dies while appending `record`.
        The contract never uses `journal` again."""
        ...

    def check_compacted(self) -> None:
        """Assert the backend's own evidence that the compacting journal did compact."""
        ...

    def cli_location(self) -> list[str]:
        """The options that point `dstreams journal show|verify` at this test's store."""
        ...

    def job_settings(self) -> dict[str, Any]:
        """The settings of a job's `--config` (app id, Kafka, journal) naming this test's store."""
        ...

    def close_all(self) -> None:
        """Close every journal this adapter made."""
        ...


class FileBackend:
    """The file journal in the test's own folder."""

    fenced_says = "holds epoch 1, but epoch 2 was opened by 'new'"
    reads_every_epoch = True  # compaction is by size only

    def __init__(self, path: Path) -> None:
        self.path = path
        self.made: list[FileJournal] = []

    @classmethod
    def start(cls, request: pytest.FixtureRequest, name: str, folder: Path) -> FileBackend:
        return cls(folder / "journal" / f"{name}.journal")

    def make(self, *, owner: str | None = None, compacting: bool = False) -> Journal:
        options: dict[str, Any] = {"compact_bytes": 3_000} if compacting else {}
        journal = FileJournal(self.path, owner=owner, **options)
        self.made.append(journal)
        return journal

    def exists(self) -> bool:
        return self.path.exists()

    def die_mid_append(self, journal: Journal, record: JournalRecord) -> None:
        frame = encode_frame(record)
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND)
        try:
            os.write(fd, frame[: len(frame) // 2])  # the process died before the rest
        finally:
            os.close(fd)

    def check_compacted(self) -> None:
        assert self.path.stat().st_size < 6_000
        assert not self.path.with_name(self.path.name + ".compact").exists()

    def cli_location(self) -> list[str]:
        return ["--file", str(self.path)]

    def job_settings(self) -> dict[str, Any]:
        return {
            "app_id": "contract",
            "kafka": {"bootstrap_servers": "localhost:9092"},  # a file journal never asks it
            "journal": {"type": "file", "path": str(self.path)},
        }

    def close_all(self) -> None:
        for journal in self.made:
            journal.close()


class KafkaBackend:
    """The Kafka journal on the session's broker, in a topic and app id unique to the test."""

    fenced_says = "epoch 1.*fenced by a newer driver"
    reads_every_epoch = False  # each open appends a snapshot, which keeps the latest epoch

    def __init__(self, bootstrap: str, name: str) -> None:
        self.bootstrap = bootstrap
        self.topic = f"{name}_journal"
        self.app_id = name
        self.made: list[KafkaJournal] = []

    @classmethod
    def start(cls, request: pytest.FixtureRequest, name: str, folder: Path) -> KafkaBackend:
        return cls(request.getfixturevalue("kafka_bootstrap"), name)

    def make(self, *, owner: str | None = None, compacting: bool = False) -> Journal:
        return self._make(owner=owner, snapshot_every=5 if compacting else 1_000)

    def _make(self, *, owner: str | None = None, snapshot_every: int = 1_000) -> KafkaJournal:
        journal = KafkaJournal(
            {"bootstrap.servers": self.bootstrap},
            topic=self.topic,
            app_id=self.app_id,
            replication_factor=1,
            min_insync_replicas=1,
            owner=owner,
            snapshot_every=snapshot_every,
            timeout_s=30.0,
        )
        self.made.append(journal)
        return journal

    def exists(self) -> bool:
        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        return self.topic in admin.list_topics(timeout=10).topics

    def die_mid_append(self, journal: Journal, record: JournalRecord) -> None:
        # The journal's own producer opens the append's transaction, sends the record to the
        # broker and is then abandoned: the transaction is neither committed nor aborted.
        assert isinstance(journal, KafkaJournal)
        producer = journal._producer
        producer.begin_transaction()
        key = self.app_id.encode()
        producer.produce(self.topic, value=encode_bytes(record), key=key, partition=PARTITION)
        assert producer.flush(10) == 0
        self.made.remove(journal)  # a dead driver closes nothing

    def check_compacted(self) -> None:
        raw = self._make(snapshot_every=5)._read_from_last_snapshot()
        assert isinstance(raw[0][1], SnapshotRecord)
        assert raw[0][0] > 40, "the read should begin near the end, at the newest snapshot"
        assert len(raw) <= 6

    def cli_location(self) -> list[str]:
        return ["--kafka", self.bootstrap, "--topic", self.topic, "--app", self.app_id]

    def job_settings(self) -> dict[str, Any]:
        return {
            "app_id": self.app_id,
            "kafka": {"bootstrap_servers": self.bootstrap},
            "journal": {"type": "kafka", "topic": self.topic},
        }

    def close_all(self) -> None:
        for journal in self.made:
            journal.close()


JOURNAL_BACKENDS = [
    pytest.param(FileBackend, id="file", marks=pytest.mark.unit),
    pytest.param(KafkaBackend, id="kafka", marks=pytest.mark.kafka),
]
