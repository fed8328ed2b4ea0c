"""The ingest endpoint's answers: POST /ingest/<source>, and /metrics, /healthz, /readyz.

`IngestRoutes` decides what each request gets; `service.ingest.asgi` is the HTTP side (framing,
deadlines, body limits) and `service.ingest.server` runs it on uvicorn.

Answers to POST /ingest/<source> (JSON bodies; see the README's "Ingest" section):

- 200 ``{"records": n, "duplicate": false}``: every record is on the in-sync replicas;
  ``"duplicate": true``: the Idempotency-Key was already written, nothing was written again.
- 401 (with WWW-Authenticate) no known bearer token, when tokens are configured; 403 the token may
  not write to this source (whether or not it exists).
- 400 malformed (bad JSON, bad key), 404 unknown source (the answer does not list the sources),
  405 not POST, 408 the body took longer than its deadline, 411 neither Content-Length nor
  a chunked body, 413 too large (body, record count or one record), 415
  unsupported Content-Type, 422 a record the source's codec or parse function refuses: nothing
  written. When one record is at fault the answer names it: ``{"error": ..., "record": n}``
  (counted from 1).
- 413/422 after Kafka refused a record as too large for the topic or invalid: nothing of the
  request written (the other requests of its transaction are written again, one per
  transaction, which is how the culprit is found: Kafka refuses whole batches).
- 429 with Retry-After: ``ingest.max_idempotency_keys`` keys are remembered; a new key waits
  until the oldest expires (keys are never forgotten early).
- 409 a request with the same Idempotency-Key is being written now (retry after Retry-After);
  422 the key was first used for a different request.
- 503 with Retry-After: not acknowledged (too few in-sync replicas, brokers down, producer
  reconnecting), or too many requests at once. Retry with the same Idempotency-Key; without
  one, a retry after a 503 may write the records twice.

No request is ever answered 200 unless its records are durable.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Mapping
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Protocol

from connectors.codecs import Codec, decode_bytes
from service.ingest.access import Decision, OpenAccess
from service.ingest.metrics import UNKNOWN_SOURCE, IngestMetrics
from service.ingest.parsing import (
    IDEMPOTENCY_HEADER,
    PLAIN_DECODERS,
    Limits,
    RequestRejected,
    checked_idempotency_key,
    fingerprint,
    parse_records,
)
from service.ingest.writer import Answer, IngestRequest
from service.observe.http import Reply, json_reply, metrics_reply, text_reply

log = logging.getLogger(__name__)
PREFIX = "/ingest/"
# A body up to this size, read with a plain decoder, is parsed on the event loop: under a
# millisecond (about 1 µs a record). Handing it to a thread and back took 5-6 ms (median, at
# full load): the thread waits for the GIL, then the loop does, each up to a switch interval.
PARSE_ON_LOOP_BYTES = 64 << 10
_STATUS_OF = {
    "written": 200,
    "duplicate": 200,
    "unavailable": 503,
    "in_progress": 409,
    "mismatch": 422,
    "too_large": 413,
    "invalid": 422,
    "too_many_keys": 429,
}


_CHALLENGE = ("WWW-Authenticate", 'Bearer realm="dstreams-ingest"')


class Access(Protocol):
    """Whether a request's Authorization header lets it write to a source
    (`service.ingest.access`)."""

    def decide(self, authorization: str | None, source: str) -> Decision: ...


class Writer(Protocol):
    """What the routes need of `service.ingest.writer.IngestWriter`."""

    @property
    def ready(self) -> bool: ...

    @property
    def healthy(self) -> bool: ...

    def submit(self, request: IngestRequest) -> Future[Answer]: ...


@dataclass(frozen=True)
class EndpointLimits:
    max_request_bytes: int
    records: Limits
    max_in_flight: int
    wait_s: float
    """Longest a request waits for the writer's answer before it is answered 503."""
    retry_after_s: int = 1


@dataclass(frozen=True)
class Call:
    """One HTTP request as the routes see it, before its body (`service.ingest.asgi` reads it)."""

    method: str
    path: str
    query: Mapping[str, str]
    """The first value of each query parameter."""
    headers: Mapping[str, str]
    """Header names in lower case."""


@dataclass(frozen=True)
class Admitted:
    """A POST /ingest/<source> whose headers are acceptable: its body may be read."""

    source: str
    topic: str


class IngestRoutes:
    """What the ingest endpoint answers; `service.ingest.asgi` serves it over HTTP.

    `page` answers everything but POST /ingest/<source>; that one is `admit` (on its headers,
    before the body is read), then `ingest` (with the body).
    """

    def __init__(
        self,
        writer: Writer,
        topics: Mapping[str, str],
        limits: EndpointLimits,
        metrics: IngestMetrics,
        decoders: Mapping[str, Codec] | None = None,
        access: Access | None = None,
    ) -> None:
        self.writer = writer
        self.access: Access = access or OpenAccess()
        self.topics = dict(topics)
        # Each source's decoder (its codec and parse function), as the job reads with it.
        self.decoders = dict(decoders or {})
        self.limits = limits
        self.metrics = metrics
        self._slots = threading.BoundedSemaphore(limits.max_in_flight)
        self._count_lock = threading.Lock()
        self._in_flight = 0

    def page(self, call: Call) -> Reply:
        if call.method not in ("GET", "HEAD"):
            return text_reply(405, "only GET here; records go to POST /ingest/<source>\n")
        if call.path == "/metrics":
            return metrics_reply(self.metrics.registry, call.headers.get("accept", ""))
        if call.path == "/healthz":
            healthy = self.writer.healthy
            why = "ok\n" if healthy else "the writer is fenced or has stopped; restart\n"
            return text_reply(200 if healthy else 503, why)
        if call.path == "/readyz":
            ready = self.writer.ready
            return text_reply(200 if ready else 503, "ready\n" if ready else "not ready\n")
        return text_reply(404, "no such page; try POST /ingest/<source>, /metrics, /healthz\n")

    # --- POST /ingest/<source> ---------------------------------------------------------------

    def admit(self, call: Call, length: int | None, chunked: bool) -> Admitted | Reply:
        """The request's target, or the refusal that its headers alone deserve: nothing of the
        body is read for those (a 413 goes out before the client sends it)."""
        source = call.path[len(PREFIX) :]
        topic = self.topics.get(source)
        decision = self.access.decide(call.headers.get("authorization"), source)
        if decision == "unauthenticated":
            # Before anything else, so that nothing is told to who has no known token.
            reply = self._error(401, "a known bearer token is required", _CHALLENGE)
        elif decision == "forbidden":
            reply = self._error(403, "this token may not write to this source")
        elif call.method != "POST":
            reply = self._error(405, "send records with POST", ("Allow", "POST"))
        elif topic is None:
            # Which sources exist is not told to whoever asks (the README lists them).
            reply = self._error(404, "no such ingest source")
        elif length is None and not chunked:
            reply = self._error(411, "a Content-Length header (or a chunked body) is required")
        elif length is not None and length > self.limits.max_request_bytes:
            reply = self._error(413, self.too_large(length))
        else:
            return Admitted(source, topic)
        self.metrics.answered(source if topic else UNKNOWN_SOURCE, _outcome_of(reply.status))
        return reply

    def too_large(self, length: int) -> str:
        return f"the body is {length} bytes; at most {self.limits.max_request_bytes} accepted"

    def refuse(self, admitted: Admitted, status: int, message: str) -> Reply:
        """A refusal of an admitted request for what its body turned out to be (too large, late)."""
        self.metrics.answered(admitted.source, _outcome_of(status))
        return self._unavailable(message) if status == 503 else self._error(status, message)

    async def ingest(self, admitted: Admitted, call: Call, body: bytes) -> Reply:
        """Parse, check and write the request; the answer once the writer gave one."""
        source = admitted.source
        if not self._slots.acquire(blocking=False):
            busy = f"{self.limits.max_in_flight} requests are in flight already; retry later"
            return self.refuse(admitted, 503, busy)
        try:
            self._count(+1)
            answer = await self._admitted(admitted, call, body)
        finally:
            self._count(-1)
            self._slots.release()
        if isinstance(answer, Reply):
            self.metrics.answered(source, _outcome_of(answer.status))
            return answer
        self.metrics.answered(source, answer.outcome_label)
        return self._answer(answer)

    async def _admitted(self, admitted: Admitted, call: Call, body: bytes) -> Answer | Reply:
        """The writer's answer, or the reply to a request that never reached it."""
        if len(body) <= PARSE_ON_LOOP_BYTES and self._decoder(admitted.source) in PLAIN_DECODERS:
            prepared = self._prepare(admitted, call, body)
        else:  # a few MiB, a schema or the job's parse function take a while: off the loop
            prepared = await asyncio.to_thread(self._prepare, admitted, call, body)
        if isinstance(prepared, Reply):
            return prepared
        future = self.writer.submit(prepared)
        try:
            answer = await asyncio.wait_for(asyncio.wrap_future(future), self.limits.wait_s)
        except TimeoutError:
            answer = Answer("unavailable", len(prepared.records), "no acknowledgement in time")
        if answer.outcome == "written":
            self.metrics.written(admitted.source, answer.records, answer.seconds)
        return answer

    def _decoder(self, source: str) -> Codec:
        return self.decoders.get(source, decode_bytes)

    def _prepare(self, admitted: Admitted, call: Call, body: bytes) -> IngestRequest | Reply:
        source = admitted.source
        content_type = call.headers.get("content-type")
        try:
            decoder = self._decoder(source)
            records = parse_records(content_type, call.query, body, self.limits.records, decoder)
            key = checked_idempotency_key(call.headers.get(IDEMPOTENCY_HEADER.lower()))
        except RequestRejected as rejected:
            return self._refused(rejected)
        print_ = fingerprint(source, content_type, call.query, body)
        return IngestRequest(source, admitted.topic, records, key, print_)

    def _answer(self, answer: Answer) -> Reply:
        status = _STATUS_OF[answer.outcome]
        if status == 200:
            document = {"records": answer.records, "duplicate": answer.outcome == "duplicate"}
            return json_reply(200, document)
        if status == 503:
            return self._unavailable(answer.detail)
        if status == 429:
            return self._error(429, answer.detail, ("Retry-After", str(answer.retry_after_s or 1)))
        retry = ("Retry-After", str(self.limits.retry_after_s))
        return self._error(status, answer.detail, *((retry,) if status == 409 else ()))

    def _refused(self, rejected: RequestRejected) -> Reply:
        document: dict[str, object] = {"error": rejected.message}
        if rejected.record is not None:
            document["record"] = rejected.record
        return json_reply(rejected.status, document)

    def _unavailable(self, detail: str) -> Reply:
        return self._error(503, detail, ("Retry-After", str(self.limits.retry_after_s)))

    def _error(self, status: int, message: str, *headers: tuple[str, str]) -> Reply:
        return json_reply(status, {"error": message}, *headers)

    def _count(self, step: int) -> None:
        with self._count_lock:
            self._in_flight += step
            self.metrics.set_in_flight(self._in_flight)


def _outcome_of(status: int) -> str:
    """The metric outcome of a reply the writer did not give."""
    if status == 413:
        return "too_large"
    if status == 503:
        return "unavailable"
    return "error" if status >= 500 else "rejected"
