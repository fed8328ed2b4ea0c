"""The ingest endpoint's HTTP routes: POST /ingest/<source>, and /metrics, /healthz, /readyz.

Answers to POST /ingest/<source> (JSON bodies; see the README's "Ingest" section):

- 200 ``{"records": n, "duplicate": false}``: every record is on the in-sync replicas;
  ``"duplicate": true``: the Idempotency-Key was already written, nothing was written again.
- 400 malformed (bad JSON, bad key), 404 unknown source (the answer does not list the sources),
  405 not POST, 411 no Content-Length, 413 too large (body, record count or one record), 415
  unsupported Content-Type, 422 a record the source's codec or parse function refuses: nothing
  written. When one record is at fault the answer names it: ``{"error": ..., "record": n}``
  (counted from 1).
- 409 a request with the same Idempotency-Key is being written now (retry after Retry-After);
  422 the key was first used for a different request.
- 503 with Retry-After: not acknowledged (too few in-sync replicas, brokers down, producer
  reconnecting), or too many requests at once. Retry with the same Idempotency-Key; without
  one, a retry after a 503 may write the records twice.

No request is ever answered 200 unless its records are durable.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from typing import Protocol

from connectors.codecs import Codec, decode_bytes
from service.ingest.metrics import UNKNOWN_SOURCE, IngestMetrics
from service.ingest.parsing import (
    IDEMPOTENCY_HEADER,
    Limits,
    RequestRejected,
    checked_idempotency_key,
    fingerprint,
    parse_records,
)
from service.ingest.writer import Answer, IngestRequest
from service.observe.http import Reply, Request, json_reply, metrics_reply, text_reply

log = logging.getLogger(__name__)
PREFIX = "/ingest/"
_STATUS_OF = {
    "written": 200,
    "duplicate": 200,
    "unavailable": 503,
    "in_progress": 409,
    "mismatch": 422,
}
# Refused bodies up to this many times the limit are read and dropped, so the client sees the
# 413; larger ones close the connection (the client may only see it broken).
_DRAIN_FACTOR = 4


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


class IngestRoutes:
    """The router of the ingest endpoint (a `service.observe.http.Router`)."""

    def __init__(
        self,
        writer: Writer,
        topics: Mapping[str, str],
        limits: EndpointLimits,
        metrics: IngestMetrics,
        decoders: Mapping[str, Codec] | None = None,
    ) -> None:
        self.writer = writer
        self.topics = dict(topics)
        # Each source's decoder (its codec and parse function), as the job reads with it.
        self.decoders = dict(decoders or {})
        self.limits = limits
        self.metrics = metrics
        self._slots = threading.BoundedSemaphore(limits.max_in_flight)
        self._count_lock = threading.Lock()
        self._in_flight = 0

    def __call__(self, request: Request) -> Reply:
        if request.path.startswith(PREFIX):
            return self._ingest(request)
        if request.method not in ("GET", "HEAD"):
            return text_reply(405, "only GET here; records go to POST /ingest/<source>\n")
        if request.path == "/metrics":
            return metrics_reply(self.metrics.registry, request.headers.get("Accept", ""))
        if request.path == "/healthz":
            healthy = self.writer.healthy
            why = "ok\n" if healthy else "the writer is fenced or has stopped; restart\n"
            return text_reply(200 if healthy else 503, why)
        if request.path == "/readyz":
            ready = self.writer.ready
            return text_reply(200 if ready else 503, "ready\n" if ready else "not ready\n")
        return text_reply(404, "no such page; try POST /ingest/<source>, /metrics, /healthz\n")

    # --- POST /ingest/<source> ---------------------------------------------------------------

    def _ingest(self, request: Request) -> Reply:
        source = request.path[len(PREFIX) :]
        topic = self.topics.get(source)
        if request.method != "POST":
            reply = self._error(405, "send records with POST", ("Allow", "POST"))
        elif topic is None:
            # Which sources exist is not told to whoever asks (the README lists them).
            reply = self._error(404, "no such ingest source")
        elif not self._slots.acquire(blocking=False):
            busy = f"{self.limits.max_in_flight} requests are in flight already; retry later"
            reply = self._unavailable(busy)
        else:
            try:
                self._count(+1)
                answer = self._admitted(request, source, topic)
            finally:
                self._count(-1)
                self._slots.release()
            if isinstance(answer, Answer):
                self.metrics.answered(source, answer.outcome_label)
                return self._answer(answer)
            reply = answer
        self.metrics.answered(source if topic else UNKNOWN_SOURCE, _outcome_of(reply.status))
        return reply

    def _admitted(self, request: Request, source: str, topic: str) -> Answer | Reply:
        """The writer's answer, or the reply to a request that never reached it."""
        try:
            body = self._body(request)
            content_type = request.headers.get("Content-Type")
            decoder = self.decoders.get(source, decode_bytes)
            records = parse_records(content_type, request.query, body, self.limits.records, decoder)
            key = checked_idempotency_key(request.headers.get(IDEMPOTENCY_HEADER))
        except RequestRejected as rejected:
            return self._refused(rejected)
        print_ = fingerprint(source, content_type, request.query, body)
        future = self.writer.submit(IngestRequest(source, topic, records, key, print_))
        try:
            answer = future.result(timeout=self.limits.wait_s)
        except FutureTimeout:
            answer = Answer("unavailable", len(records), "no acknowledgement in time")
        if answer.outcome == "written":
            self.metrics.written(source, answer.records, answer.seconds)
        return answer

    def _body(self, request: Request) -> bytes:
        length = request.content_length
        if length is None:
            if request.headers.get("Content-Length") is None:
                raise RequestRejected(411, "a Content-Length header is required")
            raise RequestRejected(400, "Content-Length is not a number")
        if length > self.limits.max_request_bytes:
            if length <= _DRAIN_FACTOR * self.limits.max_request_bytes:
                _discard(request, length)
            msg = f"the body is {length} bytes; at most {self.limits.max_request_bytes} accepted"
            raise RequestRejected(413, msg)
        body = request.read_body(length)
        if len(body) < length:
            raise RequestRejected(400, f"the body ended after {len(body)} of {length} bytes")
        return body

    def _answer(self, answer: Answer) -> Reply:
        status = _STATUS_OF[answer.outcome]
        if status == 200:
            document = {"records": answer.records, "duplicate": answer.outcome == "duplicate"}
            return json_reply(200, document)
        if status == 503:
            return self._unavailable(answer.detail)
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


def _discard(request: Request, length: int) -> None:
    """Read a refused body in small pieces, so a client that sends it all before reading the
    answer (most do) gets the 413 instead of a broken connection."""
    left = length
    while left > 0:
        piece = request.read_body(min(left, 64 << 10))
        if not piece:
            return
        left -= len(piece)


def _outcome_of(status: int) -> str:
    """The metric outcome of a reply the writer did not give."""
    if status == 413:
        return "too_large"
    if status == 503:
        return "unavailable"
    return "error" if status >= 500 else "rejected"
