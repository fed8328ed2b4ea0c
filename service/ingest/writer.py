"""Writes ingest requests to Kafka so that an acknowledged request is durable and written once.

Requests wait in one queue. `LANES` lanes take from it, each a thread owning one transactional
producer (``acks=all``, idempotent, a fixed ``transactional.id`` per app and lane), and each writes
**groups**: every request waiting when a lane begins goes into its transaction, so a
transaction's cost is shared by everything that arrived meanwhile. Lanes **take turns**:
`WRITING_AT_ONCE` (one) is in a transaction at a time, the next begins as soon as it commits,
and a lane whose transaction ended goes to the back of the line. A transaction of one id cannot
begin until the coordinator has written the markers of that id's previous one, which it does
after the commit returned: before, Kafka refuses its AddPartitionsToTxn
(CONCURRENT_TRANSACTIONS) and librdkafka asks again 20 ms later. Behind the other lanes' turns,
an id has that time without anyone waiting for it. Two transactions at once split the same
requests into smaller transactions, and a transaction costs the brokers about the same CPU
whatever its size: measured, two at once ran at 73,000-77,000 records/s where one ran at
90,000-102,000, with twice the brokers' CPU per record. For each group:

1. begin a transaction;
2. produce every record of every request (with the header ``dstreams.idempotency-key`` when
   the request has a key and ``ingest.key_header`` is on), and after a request's records its
   keys-topic record
   (`service.ingest.keys`); requests arriving before the transaction's first record is
   acknowledged join it (that wait is most of a transaction's time);
3. commit: once it returns, every record is on the in-sync replicas (``min.insync.replicas``);
4. remember the keys, then answer each request *written*.

A request's records without a Kafka key all go to one partition of its topic, the same for the
whole transaction, and the lane's next transaction takes the next partition (Kafka's sticky
partitioner does the same per batch, KIP-480): a transaction then touches two partitions (that
one and the keys topic's), not all of them, and each partition it touches costs the brokers an
AddPartitionsToTxn entry and a commit marker, each replicated. Over transactions the records
spread evenly; records with a key go where their key hashes.

When Kafka refuses records as too large for the topic or invalid (`_REFUSALS`), the group's
requests are written again one per transaction (a refused batch may hold several requests'
records): the one refused alone is answered *too large* or *invalid* (413/422), the others are
written. The lane's producer is replaced after a refusal (it owes an epoch bump, which would fail
its next transaction). Only a request written alone has a delivery report per record, which is
what names it refused; in a group only the first record has one (step 2 waits for it), and a
refusal shows as the failed transaction's code, or as the producer refusing more records because
the transaction already failed (`_may_be_refusal`), either of which sends the group back alone.

Any other failure answers every request of the group *unavailable* (HTTP 503) and nothing of it
is visible to ``read_committed`` readers such as the driver. When the transaction was cleanly
aborted the producer carries on. When the outcome is unknown (a commit that timed out, which is
never aborted and retried with the same producer since librdkafka lacks KIP-890's hardening; an
abort that failed; a fatal error) the producer is discarded and a new one is made: its
``init_transactions()`` settles the old transaction (completing or aborting it), and the keys
topic is then read on from where it was last read, so a key whose transaction did commit is known
before any request is taken again. Until then requests are answered *unavailable* at once.

A request whose key is already remembered is answered *duplicate* without writing; one whose key
is in a transaction right now, *in progress* (the client retries). The keys of a transaction whose
outcome is unknown are answered *unavailable* until its lane's new producer has settled it and the
keys topic was read after that (which needs Kafka back): meanwhile another lane must not write
them again.

A newer endpoint initialises every lane's ``transactional.id`` before it takes a request, which
fences every producer of this one: this one stops at its next write, and the process exits.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from dataclasses import dataclass, field, replace
from functools import partial
from itertools import islice
from typing import Any, Literal

from confluent_kafka import KafkaError, KafkaException

from connectors.kafka_client import CommitTimedOut, commit_transaction, is_fenced
from service.ingest.keys import KeyEntry, KeyLedger, now_ms
from service.ingest.parsing import Records

log = logging.getLogger(__name__)

KEY_HEADER = "dstreams.idempotency-key"
# Producers writing in turn (see the module docstring). A constant, not a setting: every endpoint
# of an app must initialise the same ids for the newest to fence all of the older one's.
LANES = 4
# How many lanes may be in a transaction at once (see the module docstring).
WRITING_AT_ONCE = 1
# A group is one transaction; these bound how much one failure sends back to clients.
MAX_GROUP_RECORDS = 50_000
MAX_GROUP_BYTES = 64 << 20
# How long the thread waits for requests before looking at its stop flag again.
_IDLE_WAIT_S = 0.2
# How long a topic's partition count is trusted before the producer's metadata is asked again
# (partitions added to a source's topic are written to from then on).
_PARTITIONS_KNOWN_S = 30.0
# Between attempts to make a new producer while the cluster does not answer.
_RECONNECT_PAUSE_S = (0.2, 5.0)
# Bounds init_transactions() and an abort; a coordinator slower than this is unavailable.
INIT_TIMEOUT_S = 30.0

Outcome = Literal[
    "written",
    "duplicate",
    "unavailable",
    "in_progress",
    "mismatch",
    "too_large",
    "invalid",
    "too_many_keys",
]
# The partition argument of produce() that leaves the choice to the partitioner (by key).
_BY_KEY = -1
# What produce() raises once the open transaction has failed (librdkafka's _STATE).
_FAILED_ALREADY: int = KafkaError._STATE  # noqa: SLF001
# Kafka errors that are the request's own fault: a retry fails the same way. That request is
# answered 413/422; the rest of its group is written in a new transaction.
_REFUSALS: dict[int, tuple[Outcome, str]] = {
    KafkaError.MSG_SIZE_TOO_LARGE: ("too_large", "a record is larger than the topic accepts"),
    KafkaError.RECORD_LIST_TOO_LARGE: (
        "too_large",
        "the records are larger than the topic accepts",
    ),
    KafkaError.INVALID_MSG_SIZE: ("too_large", "a record is larger than the topic accepts"),
    KafkaError.INVALID_RECORD: ("invalid", "the topic refused a record as invalid"),
    KafkaError.INVALID_MSG: ("invalid", "the topic refused a record as invalid"),
}


@dataclass(frozen=True)
class IngestRequest:
    source: str
    topic: str
    records: Records
    key: str | None
    """The client's Idempotency-Key, if it sent one."""
    fingerprint: str

    @property
    def size(self) -> int:
        """Bytes of its records' keys and values."""
        return self.records.size


@dataclass(frozen=True)
class Answer:
    outcome: Outcome
    records: int
    detail: str = ""
    seconds: float = 0.0
    """Time from submission to acknowledgement (written requests only)."""
    retry_after_s: int | None = None
    """When a retry may succeed (too_many_keys: when the oldest key expires)."""

    @property
    def outcome_label(self) -> str:
        """The outcome as `dstreams_ingest_requests_total` counts it."""
        if self.outcome in ("in_progress", "mismatch"):
            return "conflict"
        if self.outcome == "too_many_keys":
            return "throttled"
        return "rejected" if self.outcome == "invalid" else self.outcome


@dataclass
class _Pending:
    request: IngestRequest
    future: Future[Answer]
    submitted: float
    deadline: float
    refusal: int | None = None
    """The code of a Kafka error that refused one of its records (see `_REFUSALS`)."""
    acknowledged: threading.Event | None = None
    """Set by its first record's delivery report (the group's first request only)."""
    alone: bool = False
    """Written in a transaction of its own: its group failed for what one request held, and
    Kafka refuses whole batches, which mix requests, so only alone is the culprit certain. Its
    records each have a delivery report (see `_Lane._produce_request`)."""
    second_chances: int = 0
    """Transactions it may still fail for another reason and be written again (a lane's
    producer is replaced after a refusal, but another lane's may fail it meanwhile)."""

    def report(self, error: Any, message: Any) -> None:
        """A delivery report of one of its records (on the writer thread)."""
        if error is not None and error.code() in _REFUSALS:
            self.refusal = error.code()
        if self.acknowledged is not None:
            self.acknowledged.set()


@dataclass
class _Group:
    pending: list[_Pending] = field(default_factory=list)
    records: int = 0
    size: int = 0

    @property
    def deadline(self) -> float:
        return min(p.deadline for p in self.pending)


@dataclass(frozen=True)
class _Rest:
    """How a request's records after the first are produced (`_Lane._produce_request`)."""

    topic: str
    headers: list[tuple[str, bytes]]
    deadline: float
    each: _Pending | None
    """Reported for every record (a request written alone), or None."""


class _Expired(Exception):
    """The group's deadline passed before its transaction could commit."""


@dataclass
class _Intake:
    """What the intake and the lanes share; `lock` guards all of it but the ledger (thread-safe)."""

    ledger: KeyLedger
    ack_timeout_s: float
    lock: threading.Condition = field(default_factory=threading.Condition)
    queue: deque[_Pending] = field(default_factory=deque)
    in_flight: set[str] = field(default_factory=set)
    """The keys of requests queued or in a transaction, and of transactions whose outcome is
    not known yet (see `_Lane.unsettled`)."""
    stopping: bool = False
    fenced: bool = False
    keys_offset: int = 0
    """Where the next read of the keys topic starts."""
    writing_at_once: int = WRITING_AT_ONCE
    lanes_running: int = 0
    line: deque[int] = field(default_factory=deque)
    """The lanes waiting for their turn, first to begin the next transaction first."""
    writing: int = 0
    """Lanes in a transaction now."""

    def a_lane_may_begin(self) -> bool:
        """Whether a lane waits in line and may begin a transaction now: while one may, a
        request goes to it rather than into another lane's open transaction."""
        return bool(self.line) and self.writing < self.writing_at_once


class IngestWriter:
    """The intake and the lanes; `submit` is safe from any thread. See the module docstring.

    `make_producer(lane)` returns a new transactional producer for lane `lane` (not yet
    initialised); `read_keys(n)` adds the keys topic's committed records from offset `n` to the
    ledger and returns the next offset. Both are parameters so that failure handling can be
    tested without a broker.
    """

    def __init__(
        self,
        make_producer: Callable[[int], Any],
        read_keys: Callable[[int], int],
        keys_topic: str,
        ledger: KeyLedger,
        ack_timeout_s: float,
        on_ready: Callable[[bool], None] = lambda ready: None,
        lanes: int = LANES,
        on_committed: Callable[[], None] = lambda: None,
        writing_at_once: int = WRITING_AT_ONCE,
        key_header: bool = False,
    ) -> None:
        self.keys_topic = keys_topic
        self.ledger = ledger
        self.ack_timeout_s = ack_timeout_s
        self._on_ready = on_ready
        self._intake = _Intake(ledger, ack_timeout_s, writing_at_once=writing_at_once)
        tools = _LaneTools(
            make_producer, read_keys, keys_topic, self._lane_changed, on_committed, key_header
        )
        self._lanes = [_Lane(index, self._intake, tools) for index in range(lanes)]

    # --- the intake -------------------------------------------------------------------------

    @property
    def fenced(self) -> bool:
        return self._intake.fenced

    @property
    def ready(self) -> bool:
        """True while requests are taken: every lane has fenced the producers an older endpoint
        left under its id (initialised once), one lane at least has a producer now, and the keys
        were read after that; never again once fenced."""
        intake = self._intake
        return not intake.stopping and not intake.fenced and self._writing()

    def _writing(self) -> bool:
        lanes = self._lanes
        return all(lane.fenced_older for lane in lanes) and any(lane.producing for lane in lanes)

    @property
    def healthy(self) -> bool:
        """False once fenced or once a lane's thread has ended (then only a restart helps)."""
        if self._intake.fenced:
            return False
        return self._intake.stopping or all(lane.alive for lane in self._lanes)

    def start(self) -> None:
        self._intake.lanes_running = len(self._lanes)
        for lane in self._lanes:
            lane.start()

    def submit(self, request: IngestRequest) -> Future[Answer]:
        """Queue `request`, or answer it at once when it is a duplicate or cannot be taken now."""
        intake = self._intake
        with intake.lock:
            answer = self._immediate_answer(request)
            if answer is None:
                future: Future[Answer] = Future()
                now = time.monotonic()
                intake.queue.append(_Pending(request, future, now, now + self.ack_timeout_s))
                if request.key is not None:
                    intake.in_flight.add(request.key)
                intake.lock.notify_all()  # only the lane first in line may take it
                return future
        done: Future[Answer] = Future()
        done.set_result(answer)
        return done

    def _immediate_answer(self, request: IngestRequest) -> Answer | None:
        count = len(request.records)
        if self._intake.stopping:
            return Answer("unavailable", count, "the endpoint is stopping")
        if not self._writing():
            return Answer("unavailable", count, "the endpoint is (re)connecting to Kafka")
        if request.key is None:
            return None
        entry = self.ledger.get(request.key)
        if entry is not None:
            if (entry.fingerprint, entry.source) != (request.fingerprint, request.source):
                detail = (
                    f"Idempotency-Key {request.key!r} was first used for a different request "
                    f"(to source {entry.source!r}); use a new key for new records"
                )
                return Answer("mismatch", count, detail)
            return Answer("duplicate", entry.records, "already written; nothing written again")
        if any(request.key in lane.unsettled for lane in self._lanes):
            detail = "the outcome of this key's last write is being settled with Kafka; retry"
            return Answer("unavailable", count, detail)
        in_flight = self._intake.in_flight
        if request.key in in_flight:
            return Answer("in_progress", count, "a request with this key is being written now")
        if self.ledger.full(len(in_flight)):
            # Never make room by forgetting a key: that would break its retry's promise.
            detail = (
                f"{self.ledger.max_keys} idempotency keys are remembered already (the endpoint's "
                "bound); retry after Retry-After, when the oldest expires"
            )
            return Answer(
                "too_many_keys", count, detail, retry_after_s=self.ledger.seconds_until_room()
            )
        return None

    def stop(self, timeout_s: float | None = None) -> None:
        """Stop taking requests, write those already queued, and end the lanes' threads."""
        with self._intake.lock:
            self._intake.stopping = True
            self._intake.lock.notify_all()
        deadline = time.monotonic() + (
            timeout_s if timeout_s is not None else self.ack_timeout_s + 5
        )
        for lane in self._lanes:
            lane.join(max(0.0, deadline - time.monotonic()))

    def _lane_changed(self) -> None:
        self._on_ready(self.ready)


@dataclass(frozen=True)
class _LaneTools:
    """What every lane of a writer is given (see `IngestWriter`)."""

    make_producer: Callable[[int], Any]
    read_keys: Callable[[int], int]
    keys_topic: str
    changed: Callable[[], None]
    """Called when a lane becomes ready or stops being so."""
    committed: Callable[[], None]
    """Called after each transaction that committed."""
    key_header: bool
    """Whether each record carries its request's key as a header (KEY_HEADER)."""


class _Lane:
    """One transactional producer and the thread that writes its groups (module docstring)."""

    def __init__(self, index: int, intake: _Intake, tools: _LaneTools) -> None:
        self.index = index
        self.intake = intake
        self.tools = tools
        self._producer: Any = None
        self._initialising: tuple[Any, bool] | None = None
        """A producer being set up, and whether its init_transactions() has returned."""
        self._partition_counts: dict[str, tuple[int, float]] = {}
        """Each topic's partition count, and when it was asked (`_keyless_partition`)."""
        self._turn = index
        """Counts this lane's transactions: its keyless records go to partition turn mod count."""
        self.fenced_older = False
        """Whether this lane's id has been initialised once: an older endpoint's producer of
        that id can no longer commit."""
        self.unsettled: set[str] = set()
        """Keys of a transaction whose outcome is unknown: they stay in flight (a retry is
        answered unavailable) until a new producer has settled that transaction and the keys
        topic has been read after it, so that no other lane writes them again meanwhile."""
        self._thread = threading.Thread(
            target=self._run, name=f"dstreams-ingest-writer-{index}", daemon=True
        )

    @property
    def producing(self) -> bool:
        return self._producer is not None

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def start(self) -> None:
        self._thread.start()

    def join(self, timeout_s: float) -> None:
        if self._thread.is_alive():
            self._thread.join(timeout_s)

    # --- the thread ---------------------------------------------------------------------------

    def _run(self) -> None:
        pause = _RECONNECT_PAUSE_S[0]
        while True:
            with self.intake.lock:
                if self.intake.stopping and not self.intake.queue or self.intake.fenced:
                    break
            if self._producer is None:
                if self.intake.stopping:
                    break  # the other lanes write what is queued
                if self._connect():
                    pause = _RECONNECT_PAUSE_S[0]
                else:
                    time.sleep(pause)
                    pause = min(2 * pause, _RECONNECT_PAUSE_S[1])
                continue
            group = self._next_group()
            if group.pending:
                try:
                    self._write(group)
                finally:
                    self._end_turn()
        with self.intake.lock:
            if self.index in self.intake.line:
                self.intake.line.remove(self.index)
            self.intake.lanes_running -= 1
            last = self.intake.lanes_running == 0
        if last:
            self._fail_queued("the endpoint stopped")
        self._discard_producer()
        if self._initialising is not None:  # stopped while still setting one up
            _purge(self._initialising[0])
            self._initialising = None

    def _connect(self) -> bool:
        """An initialised producer and an up-to-date ledger; False if Kafka did not answer."""
        try:
            producer = self._initialised_producer()
            self.fenced_older = True
            offset = self.tools.read_keys(self.intake.keys_offset)
        except Exception as error:  # the cluster is unavailable; tried again after a pause
            log.warning("ingest producer %d not ready, retrying: %s", self.index, error)
            return False
        self._initialising = None
        with self.intake.lock:
            self.intake.keys_offset = max(self.intake.keys_offset, offset)
            self._producer = producer
            self.intake.in_flight.difference_update(self.unsettled)
            self.unsettled.clear()
        log.info(
            "ingest producer %d ready; %d idempotency keys remembered",
            self.index,
            len(self.intake.ledger),
        )
        self.tools.changed()
        return True

    def _initialised_producer(self) -> Any:
        """The producer being set up, its init_transactions() done. That call settles the
        transaction a previous producer of this id left (committed if its commit had begun, else
        aborted), which waits for the brokers; when it times out it is retried on the same
        instance, as librdkafka asks: a new instance beside it would race it for the epoch, and
        the first one to get it would be fenced by the other."""
        if self._initialising is None:
            self._initialising = (self.tools.make_producer(self.index), False)
        producer, initialised = self._initialising
        if not initialised:
            try:
                producer.init_transactions(INIT_TIMEOUT_S)
            except KafkaException as failure:
                error = failure.args[0] if failure.args else None
                if not isinstance(error, KafkaError) or error.fatal():
                    _purge(producer)  # unusable: the next attempt makes a new one
                    self._initialising = None
                raise
            self._initialising = (producer, True)
        return producer

    def _next_group(self) -> _Group:
        """The requests of this lane's next transaction once it is its turn (module docstring);
        an empty group if its turn has not come within `_IDLE_WAIT_S`."""
        group = _Group()
        intake = self.intake
        with intake.lock:
            if self.index not in intake.line:
                intake.line.append(self.index)
            if not self._my_turn():
                intake.lock.wait(_IDLE_WAIT_S)
                if not self._my_turn():
                    return group
            intake.line.popleft()
            intake.writing += 1
        self._take_queued(group)
        if not group.pending:  # another lane's open transaction took them meanwhile
            self._end_turn()
        return group

    def _my_turn(self) -> bool:
        intake = self.intake
        return bool(intake.queue) and intake.line[0] == self.index and intake.a_lane_may_begin()

    def _end_turn(self) -> None:
        with self.intake.lock:
            self.intake.writing -= 1
            self.intake.lock.notify_all()

    def _take_queued(self, group: _Group, unless_a_lane_may_begin: bool = False) -> list[_Pending]:
        """Move waiting requests into `group`, within its limits; returns those moved."""
        taken: list[_Pending] = []
        with self.intake.lock:
            if unless_a_lane_may_begin and self.intake.a_lane_may_begin():
                return taken
            while (
                self.intake.queue
                and group.records < MAX_GROUP_RECORDS
                and group.size < MAX_GROUP_BYTES
            ):
                if group.pending and (self.intake.queue[0].alone or group.pending[0].alone):
                    break
                pending = self.intake.queue.popleft()
                group.pending.append(pending)
                group.records += len(pending.request.records)
                group.size += pending.request.size
                taken.append(pending)
        return taken

    # --- one transaction ----------------------------------------------------------------------

    def _write(self, group: _Group) -> None:
        self._turn += 1
        keys = _Keys()
        first_ack = threading.Event()
        try:
            self._producer.begin_transaction()
            self._produce_requests(group.pending, keys, group.deadline, first_ack)
            self._take_late_arrivals(group, keys, first_ack)
            self._commit(group.deadline)
        except (KafkaException, _Expired, CommitTimedOut) as failure:
            self._after_failure(group, failure)
            return
        except Exception as failure:  # not a Kafka outcome, but the group is lost all the same
            log.exception("ingest transaction failed unexpectedly")
            self._after_failure(group, failure)
            return
        self.tools.committed()
        self._acknowledge(group, keys.stamped())

    def _produce_requests(
        self,
        pending: list[_Pending],
        keys: _Keys,
        deadline: float,
        first_ack: threading.Event | None = None,
    ) -> None:
        for index, item in enumerate(pending):
            if index == 0:
                item.acknowledged = first_ack
            self._produce_request(item, deadline)
            self._produce_key(item.request, keys, deadline)

    def _produce_key(self, request: IngestRequest, keys: _Keys, deadline: float) -> None:
        """The request's keys record, at once: produced with the transaction's first records,
        its partition joins the transaction in the same AddPartitionsToTxn as theirs. Produced
        last, it took a second one, which the commit waited for (one more write of the
        transaction log, replicated, per transaction)."""
        entry = self._key_entry(request)
        if entry is None:
            return
        key = str(request.key)
        keys.entries[key] = entry
        stamp = _KeyStamp(key, keys.stamps)
        self._produce(self.tools.keys_topic, key.encode(), entry.encode(), [], deadline, stamp)

    def _take_late_arrivals(self, group: _Group, keys: _Keys, first_ack: threading.Event) -> None:
        """Until the transaction's first record is acknowledged, requests that arrive join it.

        The first acknowledgement waits for the coordinator to add the partitions to the
        transaction, then for the partition leader to check that with it and the followers to
        copy the records: two thirds of a transaction's time here (13 of 20 ms at full load).
        Requests arriving meanwhile cost it nothing, and would otherwise wait a whole round;
        unless another lane may begin a transaction for them at once.
        """
        while not first_ack.is_set() and time.monotonic() < group.deadline:
            self._producer.poll(0.002)  # runs the delivery report that sets first_ack
            late = self._take_queued(group, unless_a_lane_may_begin=True)
            if late:
                self._produce_requests(late, keys, group.deadline)

    def _produce_request(self, item: _Pending, deadline: float) -> None:
        from confluent_kafka import KafkaException

        request = item.request
        records = request.records
        if not records:
            return
        # One list for all its records: the producer copies it into each record.
        traced = request.key if self.tools.key_header else None
        headers = [] if traced is None else [(KEY_HEADER, traced.encode())]
        # A delivery report runs Python, so each one takes the GIL from the HTTP side, and a
        # thread waiting for the GIL can wait a whole switch interval (5 ms): with a report per
        # record, transactions took several times longer in the endpoint than without HTTP. So
        # only the group's first record is reported (first_ack), and every record of a request
        # written alone, the one place where a report names a refused request.
        reported = item if item.alone or item.acknowledged is not None else None
        each = item if item.alone else None  # reported after the first
        keyless = self._keyless_partition(request.topic)
        first_key = records.key if records.keys is None else records.keys[0]
        partition = keyless if first_key is None else _BY_KEY
        try:
            self._produce(request.topic, first_key, records.values[0], headers, deadline,
                          reported, partition)  # fmt: skip
            rest = _Rest(request.topic, headers, deadline, each)
            if records.keys is None:
                self._produce_values(rest, records.key, partition, islice(records.values, 1, None))
            else:
                self._produce_keyed(
                    rest, islice(zip(records.keys, records.values, strict=True), 1, None)
                )
        except KafkaException as exc:  # refused at once, e.g. larger than the producer allows
            item.report(exc.args[0], None)
            raise

    def _produce_values(
        self, rest: _Rest, key: bytes | None, partition: int, values: Iterator[bytes]
    ) -> None:
        """Records that share a key (or have none): this loop runs once per record, holding the
        GIL, so it is as tight as it gets."""
        produce, topic = self._produce_call(rest.headers), rest.topic
        on_delivery = None if rest.each is None else rest.each.report
        for value in values:
            try:
                produce(topic, value, key, partition, on_delivery)
            except BufferError:  # `_produce` waits for room
                self._produce(topic, key, value, rest.headers, rest.deadline, rest.each, partition)

    def _produce_call(self, headers: list[tuple[str, bytes]]) -> Callable[..., None]:
        """The producer's produce(), given `headers` when there are some: an empty list made
        each call take twice as long."""
        produce: Callable[..., None] = self._producer.produce
        return partial(produce, headers=headers) if headers else produce

    def _produce_keyed(self, rest: _Rest, records: Iterator[tuple[bytes, bytes]]) -> None:
        """Records with a key each: where each goes, its key decides."""
        for key, value in records:
            self._produce(rest.topic, key, value, rest.headers, rest.deadline, rest.each)

    def _produce(
        self,
        topic: str,
        key: bytes | None,
        value: bytes,
        headers: list[tuple[str, bytes]],
        deadline: float,
        reported: _Pending | _KeyStamp | None = None,
        partition: int = _BY_KEY,
    ) -> None:
        on_delivery = None if reported is None else reported.report
        produce = self._produce_call(headers)
        while True:
            try:
                produce(topic, value, key, partition, on_delivery)
                return
            except BufferError:  # the local queue is full: let deliveries drain it
                if time.monotonic() > deadline:
                    msg = "the producer's queue stayed full until the acknowledgement deadline"
                    raise _Expired(msg) from None
                self._producer.poll(0.01)

    def _keyless_partition(self, topic: str) -> int:
        """Where this transaction's records without a key go in `topic` (module docstring);
        `_BY_KEY` (the partitioner chooses) while the topic's partitions are not known."""
        count, asked = self._partition_counts.get(topic, (0, -_PARTITIONS_KNOWN_S))
        if time.monotonic() - asked >= _PARTITIONS_KNOWN_S:
            found = self._producer.list_topics(topic, timeout=INIT_TIMEOUT_S).topics.get(topic)
            count = len(found.partitions) if found is not None and found.error is None else 0
            self._partition_counts[topic] = (count, time.monotonic())
        return self._turn % count if count else _BY_KEY

    def _key_entry(self, request: IngestRequest) -> KeyEntry | None:
        if request.key is None:
            return None
        return KeyEntry(request.source, request.fingerprint, len(request.records), now_ms())

    def _commit(self, deadline: float) -> None:
        """Commit; retriable errors are retried (the commit resumes) until the deadline."""
        from confluent_kafka import KafkaException

        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                msg = "the in-sync replicas did not acknowledge within ingest.ack_timeout_ms"
                raise _Expired(msg)
            try:
                commit_transaction(self._producer, remaining, "ingest transaction")
                return
            except KafkaException as exc:
                error = exc.args[0]
                if error.txn_requires_abort() or error.fatal() or not error.retriable():
                    raise
                time.sleep(0.05)

    def _acknowledge(self, group: _Group, entries: dict[str, KeyEntry]) -> None:
        now = time.monotonic()
        with self.intake.lock:
            for key, entry in entries.items():
                self.intake.ledger.add(key, entry)
            for pending in group.pending:
                self.intake.in_flight.discard(pending.request.key or "")
        for pending in group.pending:
            count = len(pending.request.records)
            pending.future.set_result(Answer("written", count, seconds=now - pending.submitted))

    # --- failures -----------------------------------------------------------------------------

    def _after_failure(self, group: _Group, failure: Exception) -> None:
        """Answer the group unavailable (or, when some of its requests were refused for what
        they hold, those refused and the others written again); keep the producer only if the
        abort was clean."""
        # The client gets the error's name only; Kafka's text (brokers, paths) stays in the log.
        detail = f"not acknowledged by the in-sync replicas ({_name_of(failure)}); retry"
        keep = self._end_failed_transaction(group, failure)
        if self.intake.fenced:
            detail = "fenced by a newer ingest endpoint of this app"
        refused = [p for p in group.pending if p.refusal is not None]
        suspect = not any(p.alone for p in group.pending) and _may_be_refusal(failure)
        if refused or suspect:
            # A refused batch leaves the idempotent producer owing an epoch bump, which librdkafka
            # takes by failing this lane's next transaction, whatever it holds (requests of
            # several clients, answered 503). A new producer gets its new epoch at init instead.
            keep = False
        if not keep:
            # Before anyone is answered: this lane takes nothing more until the keys are re-read.
            self._discard_producer()
        if (refused or suspect) and not self.intake.fenced:
            self._isolate(group, refused)
            return
        if keep and self._retry_alone(group):
            return
        self._release_keys(group, settled=keep or self.intake.fenced)
        for pending in group.pending:
            count = len(pending.request.records)
            pending.future.set_result(Answer("unavailable", count, detail))

    def _end_failed_transaction(self, group: _Group, failure: Exception) -> bool:
        """Abort the failed transaction where that is safe; True when it was cleanly aborted
        (the producer may carry on), False when a new producer must settle it."""
        error = failure.args[0] if failure.args else failure
        cause = _describe(error)
        if isinstance(failure, CommitTimedOut):
            # Fatal for this producer: aborting and going on under its epoch could let a late
            # record of this transaction into the next one. A new producer settles it.
            log.warning("ingest commit timed out; new producer: %s", failure)
        elif isinstance(error, KafkaError) and is_fenced(error):
            self.intake.fenced = True
            log.critical("ingest producer fenced by a newer endpoint of this app: %s", cause)
        elif self._abort_cleanly():
            log.warning("ingest transaction aborted (%d requests): %s", len(group.pending), cause)
            self._producer.poll(0)  # the aborted records' delivery reports: who was refused
            return True
        else:
            log.warning("ingest transaction outcome unknown; new producer: %s", cause)
        return False

    def _release_keys(self, group: _Group, settled: bool) -> None:
        """The group's keys leave the in-flight set now if nothing of it can commit any more,
        else once this lane's next producer has settled its transaction (`unsettled`)."""
        keys = [p.request.key for p in group.pending if p.request.key is not None]
        with self.intake.lock:
            if settled:
                self.intake.in_flight.difference_update(keys)
            else:
                self.unsettled.update(keys)

    def _isolate(self, group: _Group, refused: list[_Pending]) -> None:
        """Kafka refused records of this group as too large or invalid, or may have. A request
        that its own delivery reports name refused (`refused`, written alone) is answered so
        (413/422); otherwise the group goes back to the front of the queue one request per
        transaction, within the requests' own deadlines, to find which it was."""
        if len(group.pending) == 1 and refused:
            (pending,) = refused
            with self.intake.lock:
                self.intake.in_flight.discard(pending.request.key or "")
            outcome, detail = _REFUSALS[pending.refusal or 0]
            pending.future.set_result(Answer(outcome, len(pending.request.records), detail))
            return
        with self.intake.lock:
            for pending in reversed(group.pending):
                pending.acknowledged, pending.refusal, pending.alone = None, None, True
                pending.second_chances = 2
                self.intake.queue.appendleft(pending)
            self.intake.lock.notify_all()

    def _retry_alone(self, group: _Group) -> bool:
        """Write an isolated request again after a failure that was not its own (see
        `_Pending.second_chances`); False when it has none left."""
        (pending, *others) = group.pending
        if others or pending.second_chances <= 0:
            return False
        with self.intake.lock:
            pending.acknowledged, pending.second_chances = None, pending.second_chances - 1
            self.intake.queue.appendleft(pending)
            self.intake.lock.notify_all()
        return True

    def _abort_cleanly(self) -> bool:
        """Abort the open transaction; True when the broker confirmed it (nothing visible)."""
        from confluent_kafka import KafkaException

        try:
            self._producer.abort_transaction(self.intake.ack_timeout_s)
        except KafkaException as exc:
            log.warning("aborting the ingest transaction failed: %s", _describe(exc.args[0]))
            return False
        return True

    def _discard_producer(self) -> None:
        with self.intake.lock:
            producer, self._producer = self._producer, None
        if producer is not None:
            self.tools.changed()
            _purge(producer)

    def _fail_queued(self, detail: str) -> None:
        with self.intake.lock:
            queued = list(self.intake.queue)
            self.intake.queue.clear()
            self.intake.in_flight.difference_update(p.request.key for p in queued if p.request.key)
        for pending in queued:
            pending.future.set_result(Answer("unavailable", len(pending.request.records), detail))


@dataclass(frozen=True)
class _KeyStamp:
    """Keeps the timestamp of a keys record's delivery report (the broker's append time)."""

    key: str
    stamps: dict[str, int]

    def report(self, error: Any, message: Any) -> None:
        if error is None and message is not None:
            kind, stamp = message.timestamp()
            if kind != 0 and stamp > 0:  # 0: TIMESTAMP_NOT_AVAILABLE
                self.stamps[self.key] = stamp


@dataclass
class _Keys:
    """The keys records of one transaction: each key's entry, and the timestamp Kafka gave its
    record (`_KeyStamp`; the delivery reports run before the commit returns)."""

    entries: dict[str, KeyEntry] = field(default_factory=dict)
    stamps: dict[str, int] = field(default_factory=dict)

    def stamped(self) -> dict[str, KeyEntry]:
        """Entries timed by Kafka's timestamps where known (see `service.ingest.keys`)."""
        return {
            key: replace(entry, at_ms=self.stamps[key]) if key in self.stamps else entry
            for key, entry in self.entries.items()
        }


def _purge(producer: Any) -> None:
    """Drop whatever the producer still holds; it is not used again."""
    try:
        producer.purge(True, True)
        producer.flush(0)
    except Exception:  # a producer in a fatal state may refuse; it is discarded anyway
        log.debug("purging a discarded ingest producer failed", exc_info=True)


def _may_be_refusal(failure: Exception) -> bool:
    """Whether a group's failure may be Kafka refusing one of its requests' records: the failed
    transaction's own code says so (a commit reports the refused batch's error), or the producer
    took no more records because the transaction had already failed (_STATE), for a reason that
    only the records' delivery reports, which a group does not have, would tell."""
    if not isinstance(failure, KafkaException) or not failure.args:
        return False
    error = failure.args[0]
    if not isinstance(error, KafkaError):
        return False
    return error.code() in _REFUSALS or error.code() == _FAILED_ALREADY


def _name_of(failure: Exception) -> str:
    """The error's code name (e.g. NOT_ENOUGH_REPLICAS), or the deadline that passed."""
    if isinstance(failure, _Expired):
        return "no acknowledgement in time"
    error: Any = failure.args[0] if failure.args else None
    return str(error.name()) if hasattr(error, "name") else "unexpected error"


def _describe(error: Any) -> str:
    if hasattr(error, "name") and hasattr(error, "str"):
        return f"{error.name()}: {error.str()}"
    return str(error)
