"""The exactly-once Kafka sink: each task's rows and its commit marker in one Kafka transaction.

``write(BatchKey(app, output, t, p), rows)`` runs on an executor:

1. Take this process's transactional producer, ``transactional.id = dstreams.<app>.<output>.<p>``,
   or create it. Its ``init_transactions()`` (once per producer) fences every older producer with
   the same id (a Spark retry, a speculative copy, a zombie from before a driver crash) and aborts
   any transaction such a producer left open. Task ``p`` runs on whichever Python worker is free,
   so a cached producer is often fenced by another worker's; a host-local note of the last owner
   of each id (`sinks.kafka_producers.ProducerOwners`) replaces it before it wastes a transaction.
2. Read the last committed marker of ``(output, p)`` with a ``read_committed`` consumer (see
   `sinks.kafka_markers`), or take the one this producer read or committed last: nobody else can
   commit for its transactional.id without fencing it. If it is ``>= t``, skip: return
   ``WriteResult(0, skipped=True)``.
3. ``begin_transaction()``; produce every row to the output topic and the marker
   ``(output, p) -> t`` to marker partition ``p``; ``commit_transaction()``; wait until the
   marker is visible to ``read_committed`` readers (the commit's control records follow it).
4. On an abortable error, abort and go back to 2. On a fatal, fencing or ambiguous error (a commit
   that timed out may or may not have happened), discard the producer and go back to 1: the new
   producer's ``init_transactions()`` settles the old transaction, and step 2 reads the outcome.
   A timed-out commit is never retried or aborted with its producer (librdkafka lacks KIP-890:
   a late record of it could land in the next transaction of the same epoch); the commit goes
   through `connectors.kafka_client.commit_transaction`, whose `CommitTimedOut` says so.
   Only after fencing is the retry immediate; other errors may be a failover, given time to settle.

Rows are ``(key, value)`` 2-tuples or plain values; a value that is itself a pair must be written as
``(None, pair)``. Keys: ``str`` as UTF-8, ``bytes`` as they are, ``None`` as no key, anything else
as compact JSON. Values by ``serializer``, or in Avro with ``avro`` (`connectors.avro.AvroOutput`:
the Confluent wire format with a schema registry, plain Avro binary without; keys too when it has
a key schema): ``"json"`` compact JSON with sorted keys (a replay writes
identical bytes), ``"utf-8"`` ``str(value)`` as UTF-8, ``"bytes"`` bytes as they are; ``None`` is a
null value (a tombstone). A word count's ``("word", 3)`` becomes key ``b"word"``, value ``b"3"``.

The number of tasks may change from batch to batch: before each write job the driver grows the
marker topic to a partition per task (`KafkaSink.prepare_tasks`; see `sinks.kafka_markers`).

Placement is stable across replays: keyed rows go where the Java client would put them (murmur2);
rows without a key go to output partition ``p % partitions``.

Where the writes run is ``write_from``: ``"executors"`` (the tasks, as above), ``"driver"`` (the
driver collects each partition and runs the same ``write``, keeping one long-lived producer per
transactional.id in its own process), or ``"auto"``, the default: the driver when the configured
Spark master is ``local``/``local[...]`` (``local_master``, passed in by whoever builds the sink
from the settings), else the executors. In local mode task ``p``
lands on whichever Python worker is idle, so on executors a producer would be fenced by another
worker's and re-initialised (0.5-1 s) in most batches; the driver's producers never move. The
fencing is the same on both paths (docs/architecture.md, "Sinks"): a new driver's
``init_transactions()`` fences a zombie driver's producers as it fences a zombie task's.
"""

from __future__ import annotations

import enum
import json
import logging
import time
from collections.abc import Callable, Iterable
from typing import Any, Literal, NamedTuple

from confluent_kafka import KafkaException

from connectors.avro import AvroOutput
from connectors.kafka_client import (
    JAVA_PLACEMENT,
    CommitTimedOut,
    TopicRole,
    TopicSpec,
    broker_transaction_limit,
    check_topic_name,
    commit_transaction,
    ensure_topic,
    is_fenced,
    is_unanswered,
    new_admin_client,
    partition_count,
    transactional_producer_config,
)
from service import faults
from service.errors import ConfigError, SinkError
from sinks.base import BatchKey, KafkaNeeds, KafkaTopic, WriteResult, error_chain
from sinks.kafka_markers import (
    MARKER_TOPIC,
    MARKER_TOPIC_CONFIG,
    Marker,
    close_marker_readers,
    default_marker_topic,
    marker_reader,
)
from sinks.kafka_producers import (
    TransactionalProducer,
    client_settings,
    close_producers,
    discard_producer,
    known_marker,
    open_producers,
    transactional_producer,
)

Serializer = Literal["json", "utf-8", "bytes"]
SERIALIZERS: tuple[Serializer, ...] = ("json", "utf-8", "bytes")
WriteFrom = Literal["auto", "driver", "executors"]
WRITE_FROM: tuple[WriteFrom, ...] = ("auto", "driver", "executors")
# The sink sets these itself; another value would break fencing or atomicity. (The marker reader
# overrides consumer settings such as isolation.level, so a source's settings may be shared.)
RESERVED_SETTINGS = frozenset(
    {"transactional.id", "enable.idempotence", "acks", "transaction.timeout.ms"}
)
# In-task attempts at one write before the task fails and Spark's own task retry takes over.
MAX_ATTEMPTS = 5
# As long as a PostgreSQL sink's: brokers restarting take seconds, a cluster's outage longer than
# a few minutes is an incident for a person (`sinks.<name>.outage_limit_ms`).
DEFAULT_OUTAGE_LIMIT_S = 300.0
# One metadata request of `unreachable()`; a cluster slower than this is not usable now.
_PROBE_TIMEOUT_S = 5.0

_LOG = logging.getLogger(__name__)
OUTPUT_TOPIC = TopicRole("output topic", SinkError)


class _Outcome(enum.Enum):
    """What one attempt at a task's transaction came to."""

    COMMITTED = "committed"
    RETRY_NOW = "retry now"  # fenced: a new producer can try at once
    RETRY_LATER = "retry later"  # aborted, or ambiguous: give a failover time to settle


class OutboundRecord(NamedTuple):
    """One serialized record for the output topic (a tuple: built once per row, so kept cheap)."""

    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...] = ()


class KafkaSink:
    """Writes each `BatchKey` to a Kafka topic exactly once (see the module docstring).

    ``conf`` holds the librdkafka settings shared by producer, consumer and admin client
    (``bootstrap.servers``, ``security.protocol``, ``sasl.*``, ...). ``marker_topic`` defaults to
    ``dstreams.markers.<app>.<output>`` and must not be shared between outputs; it has a partition
    per task of the output: ``marker_partitions`` (by default ``partitions``) at setup, grown by
    `prepare_tasks` before any write job with more tasks. The sink pickles as configuration (and
    the marker partitions known to exist); clients live in per-process caches
    (`sinks.kafka_producers`, `sinks.kafka_markers`). ``write_from`` says which processes write
    (see the module docstring); ``local_master`` says whether the configured Spark master is
    local, which decides ``auto``.
    """

    def __init__(
        self,
        conf: dict[str, str],
        topic: str,
        partitions: int = 4,
        replication_factor: int = 1,
        marker_topic: str | None = None,
        transaction_timeout_ms: int = 60000,
        serializer: Serializer = "json",
        marker_partitions: int | None = None,
        avro: AvroOutput | None = None,
        write_from: WriteFrom = "auto",
        local_master: bool = False,
        outage_limit_s: float = DEFAULT_OUTAGE_LIMIT_S,
    ) -> None:
        _check_settings(conf, partitions, replication_factor, transaction_timeout_ms, serializer)
        if write_from not in WRITE_FROM:
            msg = f"write_from must be one of {', '.join(WRITE_FROM)}, got {write_from!r}"
            raise ConfigError(msg)
        check_topic_name(topic, "output topic")
        if marker_topic is not None:
            check_topic_name(marker_topic, "marker topic")
        self.conf = dict(conf)
        self.topic = topic
        self.partitions = partitions
        self.replication_factor = replication_factor
        self.marker_topic = marker_topic
        self.marker_partitions = marker_partitions or partitions
        self.transaction_timeout_ms = transaction_timeout_ms
        self.serializer: Serializer = serializer
        # Avro values (and keys) instead of `serializer`; schema ids are fixed in `setup`.
        self.avro = avro
        self.write_from: WriteFrom = write_from
        # How long the driver waits out the cluster's outage before it stops (WaitsOutOutages).
        self.outage_limit_s = outage_limit_s
        # Decided once, here: whether the driver runs `write` (docs/architecture.md, Sinks).
        self.writes_on_driver = write_from == "driver" or (write_from == "auto" and local_master)
        # Marker partitions known to exist, by marker topic: a steady job grows nothing.
        self._marker_capacity: dict[str, int] = {}

    # When the driver writes, it may write a batch's partitions side by side: each has its own
    # transactional producer, and the marker reader serializes its own reads. A commit waits
    # for the coordinator, so four partitions in a row took four round trips.
    writes_in_parallel = True
    # What the output topic is to this sink, in the driver's checks and metrics.
    topic_role = "output"

    @staticmethod
    def transactional_id_prefix(app: str) -> str:
        """What every transactional id of the app's Kafka outputs starts with."""
        return f"dstreams.{app}."

    @classmethod
    def transactional_id(cls, app: str, output: str, partition: int) -> str:
        # Dots cannot occur in app or output names, so the id is unambiguous.
        return f"{cls.transactional_id_prefix(app)}{output}.{partition}"

    def kafka_needs(self, app: str, output: str) -> KafkaNeeds:
        """The output topic (written) and the marker topic (written, and read back by `commit`
        and recovery), both created by `setup` when missing; the transactional ids; and
        `setup` reads the brokers' transaction.max.timeout.ms."""
        rf = self.replication_factor
        markers = self.marker_topic_for(app, output)
        return KafkaNeeds(
            topics=(
                KafkaTopic(self.topic, self.topic_role, ("WRITE",), rf),
                KafkaTopic(markers, "markers", ("WRITE", "READ", "ALTER"), rf),
            ),
            transactional_id_prefix=self.transactional_id_prefix(app),
            reads_broker_configs=True,
        )

    def marker_topic_for(self, app: str, output: str) -> str:
        topic = self.marker_topic or default_marker_topic(app, output)
        check_topic_name(topic, "marker topic")
        return topic

    def producer_settings(self, key: BatchKey) -> dict[str, Any]:
        """The producer configuration of `key`'s task, fixed transactional.id included."""
        return transactional_producer_config(
            self.conf,
            self.transactional_id(key.app, key.output, key.partition),
            self.transaction_timeout_ms,
            defaults=JAVA_PLACEMENT,
        )

    # -- driver --

    def setup(self, app: str, output: str) -> None:
        """Check the transaction timeout, create the output and marker topics if missing, and
        when the driver writes, open its producers (the engine calls this once it holds the
        journal's epoch, so fencing the previous driver's producers is what it must do)."""
        marker_topic = self.marker_topic_for(app, output)
        admin = new_admin_client(client_settings(self.conf))
        self.check_limits(admin)
        rf = self.replication_factor
        ensure_topic(admin, TopicSpec(self.topic, self.partitions, rf), OUTPUT_TOPIC, "keep")
        self._grow_marker_topic(admin, marker_topic, self.marker_partitions)
        if self.writes_on_driver:
            self.open_driver_producers(app, output)

    def check_limits(self, admin: Any = None) -> None:
        """`ConfigError` unless the brokers accept this sink's transaction timeout and, with
        Avro, the schema registry has the subjects it writes (registered now with
        `auto_register`). Part of `setup`, and of the driver's checks before it starts Spark
        (`service.driver.preflight`, which `dstreams check` runs too)."""
        admin = admin or new_admin_client(client_settings(self.conf))
        limit = broker_transaction_limit(admin)
        if self.transaction_timeout_ms > limit:
            msg = (
                f"transaction_timeout_ms={self.transaction_timeout_ms} exceeds the brokers' "
                f"transaction.max.timeout.ms={limit}, so every transaction would be refused; lower "
                "transaction_timeout_ms, or raise transaction.max.timeout.ms on the brokers"
            )
            raise ConfigError(msg)
        if self.avro is not None:
            self.avro.prepare(self.topic)

    def forget_before(self, app: str, output: str, batch_time: int) -> None:
        """Nothing: the marker topic is compacted, so it keeps only each partition's newest."""

    def prepare_tasks(self, app: str, output: str, tasks: int) -> None:
        """Before each write job: grow the marker topic to at least a partition per task.

        The number of tasks is whatever the batch's plan makes it (a map-only job has one per
        input range), so it is learnt here rather than configured; a replay has the same plan and
        the same number. Growing is safe: task p uses marker partition p whatever the count, and
        a new partition holds no marker, which reads as "nothing committed" (`sinks.kafka_markers`).
        """
        marker_topic = self.marker_topic_for(app, output)
        if tasks <= self._marker_capacity.get(marker_topic, 0):
            return
        self._grow_marker_topic(new_admin_client(client_settings(self.conf)), marker_topic, tasks)

    def _grow_marker_topic(self, admin: Any, marker_topic: str, partitions: int) -> None:
        """Create the marker topic, or grow it to `partitions` partitions (more are kept)."""
        wanted = max(partitions, self.marker_partitions)
        rf = self.replication_factor
        # Deletion (cleanup.policy=delete) would drop the newest marker of an idle partition.
        markers = TopicSpec(
            marker_topic, wanted, rf, MARKER_TOPIC_CONFIG, tuple(MARKER_TOPIC_CONFIG)
        )
        ensure_topic(admin, markers, MARKER_TOPIC, "grow")
        self._marker_capacity[marker_topic] = wanted

    def open_driver_producers(self, app: str, output: str) -> None:
        """The driver's producers of the marker partitions made at setup, initialized side by
        side now rather than one by one in the first batch (see
        `sinks.kafka_producers.open_producers`); a later write with more tasks opens the rest."""
        keys = [BatchKey(app, output, 0, p) for p in range(self.marker_partitions)]
        open_producers([self.producer_settings(key) for key in keys])

    def commit(self, app: str, output: str, batch_time: int, partitions: int) -> None:
        """Raise `SinkError` unless every partition's last committed marker is `>= batch_time`.

        Markers this process committed itself (the driver's writes) are known already; only the
        others are read from the marker topic (one round trip of ~15-30 ms per batch saved)."""
        found = self._known_markers(app, output, batch_time, partitions)
        unknown = [p for p, t in found.items() if t is None or t < batch_time]
        if unknown:
            found |= self._read_markers(app, output, batch_time, unknown)
        missing = {p: t for p, t in found.items() if t is None or t < batch_time}
        if missing:
            shown = ", ".join(f"{p} (last marker {t})" for p, t in sorted(missing.items()))
            msg = (
                f"output {output!r} of app {app!r}: expected committed markers >= {batch_time} for "
                f"all {partitions} partitions, missing for partitions {shown}; re-run the batch's "
                "write job (writes are idempotent) before completing the batch"
            )
            raise SinkError(msg)

    def _known_markers(
        self, app: str, output: str, batch_time: int, partitions: int
    ) -> dict[int, int | None]:
        keys = [BatchKey(app, output, batch_time, p) for p in range(partitions)]
        return {key.partition: known_marker(self.producer_settings(key)) for key in keys}

    def _read_markers(
        self, app: str, output: str, batch_time: int, wanted: list[int]
    ) -> dict[int, int | None]:
        """The last committed markers of the `wanted` partitions, read from the marker topic."""
        topic = self.marker_topic_for(app, output)
        reader = marker_reader(self.conf)
        available = partition_count(reader.tail.consumer, topic)
        expected = [Marker(app, output, p, batch_time) for p in wanted if p < available]
        return dict.fromkeys(wanted) | reader.last_of(topic, expected)

    def close(self) -> None:
        """Close this process's cached producers and marker readers.

        The cache is shared by every Kafka sink of the process, so this releases theirs too; a
        sink used afterwards opens new clients. Closing an empty cache does nothing.
        """
        close_clients()

    def unreachable(self) -> str | None:
        """Driver-side: why the cluster cannot take this output's writes now (no broker answers a
        metadata request, or a partition of the topic has no leader), or None."""
        admin = new_admin_client(self.conf)
        try:
            topic = admin.list_topics(self.topic, timeout=_PROBE_TIMEOUT_S).topics.get(self.topic)
        except KafkaException as exc:
            return f"no broker answered: {exc.args[0].str()}"
        if topic is None or topic.error is not None:
            return None  # nothing to wait for: the step's own error says what is wrong
        leaderless = sorted(p for p, state in topic.partitions.items() if state.leader < 0)
        if leaderless:
            return f"partitions {leaderless} of {self.topic} have no leader"
        return None

    def outage_in(self, error: BaseException) -> str | None:
        """Why `error` shows the cluster unanswering (every broker down, a timeout, no leader
        or in-sync replicas), found in its causes; None for refusals (authorization, a record
        too large), which no wait cures."""
        for cause in error_chain(error):
            found = cause.args[0] if isinstance(cause, KafkaException) and cause.args else None
            if isinstance(cause, CommitTimedOut):
                found = cause.error
            if found is not None and is_unanswered(found):
                return f"{found.name()}: {found.str()}"
        return None

    # -- executor --

    def write(self, key: BatchKey, rows: Iterable[Any]) -> WriteResult:
        """Commit `rows` and the marker of `key` in one transaction, unless already committed."""
        records = self._encode_all(key, rows)
        marker = Marker(key.app, key.output, key.partition, key.batch_time)
        marker_topic = self.marker_topic_for(key.app, key.output)
        reader = marker_reader(self.conf)
        opened = False
        failures: list[BaseException] = []
        for attempt in range(1, MAX_ATTEMPTS + 1):
            producer = transactional_producer(self.producer_settings(key))
            opened = opened or producer.first_use()
            producer.require_partition(marker_topic, key.partition)
            if not producer.marker_known:
                producer.remember_marker(reader.last(marker_topic, marker))
            committed = producer.marker
            if committed is not None and committed >= key.batch_time:
                _LOG.info("%s skipped: marker %d is already committed", key, committed)
                return WriteResult(0, skipped=True, opened_client=opened)
            outcome = self._try_transaction(producer, key, records, attempt, failures)
            if outcome is _Outcome.COMMITTED:
                return WriteResult(len(records), opened_client=opened)
            if outcome is _Outcome.RETRY_LATER and attempt < MAX_ATTEMPTS:
                time.sleep(min(0.1 * 2**attempt, 2.0))  # let a failover settle
        msg = (
            f"{key}: no transaction committed in {MAX_ATTEMPTS} attempts (see the warnings above); "
            "the task fails so that Spark retries it; if it keeps failing, check the cluster"
        )
        raise SinkError(msg) from (failures[-1] if failures else None)

    def encode_row(self, row: Any, key: BatchKey) -> OutboundRecord:
        """Serialize one row; subclasses define other row formats (see `sinks.dead_letters`)."""
        row_key, value = row if isinstance(row, tuple) and len(row) == 2 else (None, row)
        avro = self.avro
        if avro is None:
            return OutboundRecord(encode_key(row_key), encode_value(value, self.serializer))
        encoded_key = avro.encode_key(row_key) if avro.encodes_keys else encode_key(row_key)
        return OutboundRecord(encoded_key, avro.encode_value(value))

    def _encode_all(self, key: BatchKey, rows: Iterable[Any]) -> list[OutboundRecord]:
        """Serialize every row before a transaction opens, so bad data never aborts one."""
        records = []
        for index, row in enumerate(rows):
            try:
                records.append(self.encode_row(row, key))
            except (TypeError, ValueError) as exc:
                msg = f"{key}: row {index} ({type(row).__name__}) cannot be written: {exc}"
                raise SinkError(msg) from exc
        return records

    def _try_transaction(
        self,
        producer: TransactionalProducer,
        key: BatchKey,
        records: list[OutboundRecord],
        attempt: int,
        failures: list[BaseException],
    ) -> _Outcome:
        """One attempt; a failure it recovers from is appended to `failures`."""
        try:
            self._transact(producer, key, records)
            producer.remember_marker(key.batch_time)
            return _Outcome.COMMITTED
        except KafkaException as exc:
            failures.append(exc)
            return self._recover(producer, key, exc.args[0], attempt)
        except CommitTimedOut as timed_out:
            failures.append(timed_out)
            # Fatal for this producer: the next attempt's producer takes a new epoch first.
            _LOG.warning("%s attempt %d: %s", key, attempt, timed_out)
            discard_producer(producer)
            return _Outcome.RETRY_LATER
        except BaseException:
            discard_producer(producer)  # a cached producer must never stay inside a transaction
            raise

    def _transact(
        self, producer: TransactionalProducer, key: BatchKey, records: list[OutboundRecord]
    ) -> None:
        marker = Marker(key.app, key.output, key.partition, key.batch_time, len(records))
        marker_topic = self.marker_topic_for(key.app, key.output)
        keyless_partition = key.partition % producer.require_partition(self.topic, 0)
        client = producer.producer
        client.begin_transaction()
        for index, record in enumerate(records):
            _produce(client, self.topic, record, keyless_partition if record.key is None else -1)
            if index % 10_000 == 9_999:
                client.poll(0)  # serve delivery reports so that they do not pile up
        offsets: list[int] = []
        marker_record = OutboundRecord(marker.record_key, marker.encode())
        _produce(client, marker_topic, marker_record, key.partition, offsets.append)
        faults.crash_point("sink-mid-write")
        # The broker aborts a transaction older than transaction.timeout.ms, so waiting longer for
        # the commit cannot help; a timeout here is ambiguous and `_recover` settles it.
        commit_transaction(client, self.transaction_timeout_ms / 1000, str(key))
        client.poll(0)  # serve the marker's delivery report, if the commit's flush did not
        if not offsets:
            msg = f"{key}: committed, but the marker's offset was not reported; retry the task"
            raise SinkError(msg)
        marker_reader(self.conf).wait_until_visible(marker_topic, key.partition, offsets[-1])

    def _recover(
        self, producer: TransactionalProducer, key: BatchKey, error: Any, attempt: int
    ) -> _Outcome:
        """After a failed transaction: abort it if Kafka allows, else discard the producer.

        Fencing means that a newer producer of the same id exists (in local mode, most often
        this task's previous run on the other Python worker): a new producer may try again at
        once. Other errors may come from a failover, which needs a moment to settle.
        """
        name = error.name()
        if error.txn_requires_abort() and not error.fatal():
            _LOG.warning("%s attempt %d: abortable error %s; aborting", key, attempt, name)
            try:
                producer.producer.abort_transaction(self.transaction_timeout_ms / 1000)
                return _Outcome.RETRY_LATER
            except KafkaException as exc:
                _LOG.warning("%s: abort failed (%s); re-creating the producer", key, exc.args[0])
        elif is_fenced(error):
            _LOG.info("%s attempt %d: fenced by a newer producer; re-creating it", key, attempt)
            discard_producer(producer)
            return _Outcome.RETRY_NOW
        else:
            why = f"fatal or ambiguous error {name} ({error.str()})"
            _LOG.warning("%s attempt %d: %s; re-creating the producer", key, attempt, why)
        discard_producer(producer)
        return _Outcome.RETRY_LATER


def encode_key(key: Any) -> bytes | None:
    if key is None or isinstance(key, bytes):
        return key
    if isinstance(key, str):
        return key.encode()
    return _json_bytes(key)


def encode_value(value: Any, serializer: Serializer) -> bytes | None:
    if value is None:
        return None
    if serializer == "json":
        return _json_bytes(value)
    if serializer == "utf-8":
        return str(value).encode()
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value)
    msg = f"serializer 'bytes' expects bytes values, found {type(value).__name__}"
    raise TypeError(msg)


# One encoder for every row: json.dumps with options builds a new encoder per call.
# allow_nan=False: NaN and Infinity are not JSON, and a reader in another language would fail.
_JSON = json.JSONEncoder(separators=(",", ":"), sort_keys=True, ensure_ascii=False, allow_nan=False)


def _json_bytes(value: Any) -> bytes:
    if type(value) is int:  # the common count: JSON's text for an int is its decimal form
        return b"%d" % value
    return _JSON.encode(value).encode()


def _produce(
    client: Any,
    topic: str,
    record: OutboundRecord,
    partition: int,
    on_offset: Callable[[int], None] | None = None,
) -> None:
    """Produce one record to `partition` (-1: chosen by the partitioner from the key)."""
    options: dict[str, Any] = {}
    if record.headers:
        options["headers"] = list(record.headers)
    if on_offset is not None:

        def delivered(error: Any, message: Any) -> None:
            if error is None:
                on_offset(int(message.offset()))

        options["on_delivery"] = delivered
    while True:
        try:
            client.produce(topic, record.value, record.key, partition, **options)
            return
        except BufferError:
            client.poll(0.05)  # the local queue is full: let deliveries drain it a little


def _check_settings(
    conf: dict[str, str], partitions: int, rf: int, timeout_ms: int, serializer: str
) -> None:
    problems = [
        f"{name} is set by the sink itself" for name in sorted(RESERVED_SETTINGS & set(conf))
    ]
    if partitions < 1 or rf < 1:
        problems.append(f"partitions={partitions}, replication_factor={rf}: expected >= 1")
    if timeout_ms < 1000:
        problems.append(f"transaction_timeout_ms={timeout_ms}: expected >= 1000")
    if serializer not in SERIALIZERS:
        problems.append(f"serializer={serializer!r}: expected one of {', '.join(SERIALIZERS)}")
    if problems:
        msg = "invalid KafkaSink settings: " + "; ".join(problems) + "; remove or correct them"
        raise ConfigError(msg)


def close_clients() -> None:
    """Close every cached producer and marker reader of this process (worker shutdown, tests)."""
    close_producers()
    close_marker_readers()
