"""The Kafka sink's part of `dstreams audit` (and the dead-letter sink's, a Kafka sink too); see
`service.cli.sink_audit` and, for the markers, `sinks.kafka_markers`.

1. Every committed marker of the output's marker topic is read (`read_committed`, from the start
   of each partition): each (batch, partition) of a completed batch must have exactly one, and
   partition p holds only task p's markers.
2. The topic is compacted, and compaction keeps a suffix of each partition's markers (the newest
   per key survives): a missing marker older than every marker left, in a partition whose log
   no longer starts with a committed marker, may have been compacted away, and is only counted.
3. Each marker names the records its transaction wrote (`rows`); the output topic's committed
   records must be exactly the sum over every output writing that topic. The count is skipped
   when it cannot hold: retention deleted records of the output topic, a marker was compacted
   away, or markers of older builds do not name their rows.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from connectors.kafka_client import CommittedTail, TopicRole, partition_count
from service.cli.marker_audit import OutputCheck, Tasks, journaled_rows, marker_violations
from service.errors import SinkError
from service.journal.audit import Violation
from service.journal.base import JournalState
from sinks.base import Sink
from sinks.dead_letters import DeadLetterSink
from sinks.kafka import KafkaSink
from sinks.kafka_markers import MARKER_TOPIC, Marker
from sinks.kafka_producers import client_settings

# Each wait for the next record while reading a topic from its start: reads as long as the
# topic is, and stops only when the brokers stop answering.
READ_PATIENCE_S = 30.0
_OUTPUT_TOPIC = TopicRole("output topic", SinkError)
_GROUP = "dstreams-audit"  # never joined: partitions are assigned


@dataclass
class MarkerLog:
    """What an output's marker topic holds, read from the start of each partition."""

    found: Counter[tuple[int, int]] = field(default_factory=Counter)
    first: dict[int, tuple[int, int]] = field(default_factory=dict)
    """By partition: (batch time, offset) of its oldest committed marker."""
    compacted: set[int] = field(default_factory=set)
    """Partitions whose log no longer starts with a committed marker."""
    rows: int | None = 0
    """Records the markers name; None when one of them does not say."""
    violations: list[Violation] = field(default_factory=list)

    def compacted_away(self, t: int, p: int) -> bool:
        """A missing marker (t, p) older than every marker left in a compacted partition."""
        return p in self.compacted and p in self.first and t < self.first[p][0]


def check_kafka_outputs(
    app: str, sinks: Mapping[str, Sink | None], tasks: Mapping[str, Tasks], state: JournalState
) -> dict[str, OutputCheck]:
    """A check per output with a Kafka sink; the data count per output topic, under the last
    output (in name order) that writes it."""
    kafka = {o: s for o, s in sorted(sinks.items()) if isinstance(s, KafkaSink)}
    logs = {o: read_markers(app, o, s) for o, s in kafka.items()}
    checks = {}
    for output, sink in kafka.items():
        log = logs[output]
        violations, notes = marker_violations(output, tasks[output], log.found, log.compacted_away)
        if isinstance(sink, DeadLetterSink):
            notes.append(f"{journaled_rows(state, output)} dead letters")
        kind = "dead-letters" if isinstance(sink, DeadLetterSink) else "kafka"
        checks[output] = (kind, [*log.violations, *violations], notes)
    for topic, outputs in _by_topic(kafka).items():
        violations, notes = count_records(kafka[outputs[0]], topic, {o: logs[o] for o in outputs})
        checks[outputs[-1]][1].extend(violations)
        checks[outputs[-1]][2].extend(notes)
    return {
        o: OutputCheck(o, kind, True, len(tasks[o]), tuple(violations), tuple(notes))
        for o, (kind, violations, notes) in checks.items()
    }


def _by_topic(sinks: Mapping[str, KafkaSink]) -> dict[str, list[str]]:
    topics: dict[str, list[str]] = {}
    for output, sink in sinks.items():
        topics.setdefault(sink.topic, []).append(output)
    return topics


def read_markers(app: str, output: str, sink: KafkaSink) -> MarkerLog:
    """Every committed marker of `output`'s marker topic (step 1 and 2 of the module)."""
    topic = sink.marker_topic_for(app, output)
    log = MarkerLog()
    for p, low, records in _committed(sink.conf, topic, MARKER_TOPIC):
        for record in records:
            _add_marker(log, app, output, p, record)
        if records and records[0].offset() > low:
            log.compacted.add(p)
    return log


def _add_marker(log: MarkerLog, app: str, output: str, p: int, record: Any) -> None:
    try:
        marker = Marker.from_json(json.loads(record.value()))
    except (ValueError, KeyError, TypeError) as error:
        marker = None
        problem = f"is not a marker ({error!r})"
    if marker is not None and (marker.app, marker.output, marker.partition) == (app, output, p):
        log.found[(marker.batch_time, p)] += 1
        log.first.setdefault(p, (marker.batch_time, record.offset()))
        log.rows = None if log.rows is None or marker.rows is None else log.rows + marker.rows
        return
    if marker is not None:
        problem = f"names {marker.app}/{marker.output} partition {marker.partition}"
    what = f"marker topic {record.topic()} partition {p} offset {record.offset()} {problem}"
    log.violations.append(Violation("foreign-marker", what + f", expected {app}/{output}/{p}"))


def count_records(
    sink: KafkaSink, topic: str, logs: Mapping[str, MarkerLog]
) -> tuple[list[Violation], list[str]]:
    """Step 3: the committed records of the output `topic` against what its markers name."""
    if any(log.rows is None for log in logs.values()):
        return [], [f"records of {topic} not counted: markers of an older build name no rows"]
    if any(log.compacted for log in logs.values()):
        return [], [f"records of {topic} not counted: markers were compacted away"]
    records, deleted = 0, False
    for _p, low, partition_records in _committed(sink.conf, topic, _OUTPUT_TOPIC, keep=False):
        records += len(partition_records)
        deleted = deleted or low > 0
    if deleted:
        return [], [f"records of {topic} not counted: retention deleted some"]
    marked = sum(log.rows or 0 for log in logs.values())
    if records == marked:
        return [], []
    cause = "a part written twice, or records of another writer" if records > marked else "lost"
    what = (
        f"output topic {topic} holds {records} committed records, but the markers of "
        f"{', '.join(logs)} name {marked} ({cause})"
    )
    return [Violation("record-count", what)], []


def _committed(
    conf: dict[str, Any], topic: str, role: TopicRole, *, keep: bool = True
) -> list[tuple[int, int, list[Any]]]:
    """(partition, low offset, committed records) of every partition of `topic`; without
    `keep`, the records are `None` placeholders, counted only."""
    tail = CommittedTail(client_settings(conf), _GROUP, role)
    try:
        partitions = partition_count(tail.consumer, topic)
        bounds = {p: tail.end_offsets(topic, p, READ_PATIENCE_S) for p in range(partitions)}
        found: dict[int, list[Any]] = {p: [] for p in bounds}
        for record in tail.stream(topic, bounds, READ_PATIENCE_S, while_progressing=True):
            found[record.partition()].append(record if keep else None)
        return [(p, bounds[p][0], found[p]) for p in sorted(found)]
    finally:
        tail.close()
