"""The ingest endpoint's HTTP answers, on loopback, with a scripted writer (no broker).

What each answer means for durability is tested against brokers in
tests/kafka/test_ingest_endpoint.py; here: status codes, headers, bodies, limits, metrics.
"""

from __future__ import annotations

import http.client
import json
import socket
import threading
from collections.abc import Iterator
from concurrent.futures import Future
from dataclasses import dataclass, field

import pytest
from prometheus_client.parser import text_string_to_metric_families

from service.ingest.asgi import IngestApp
from service.ingest.endpoint import EndpointLimits, IngestRoutes
from service.ingest.metrics import IngestMetrics
from service.ingest.parsing import Limits
from service.ingest.server import IngestServer, ServerOptions
from service.ingest.writer import Answer, IngestRequest

NDJSON = {"Content-Type": "application/x-ndjson"}


@dataclass
class ScriptedWriter:
    """Answers every request with `answer` (written, by default) and keeps what it was sent."""

    answer: Answer | None = None
    hold: threading.Event | None = None
    received: list[IngestRequest] = field(default_factory=list)
    ready: bool = True
    healthy: bool = True

    def submit(self, request: IngestRequest) -> Future[Answer]:
        self.received.append(request)
        future: Future[Answer] = Future()
        answer = self.answer or Answer("written", len(request.records), seconds=0.01)
        hold = self.hold
        if hold is None:
            future.set_result(answer)
        else:

            def release() -> None:
                hold.wait(10)
                future.set_result(answer)

            threading.Thread(target=release).start()
        return future


@dataclass
class Endpoint:
    writer: ScriptedWriter
    metrics: IngestMetrics
    port: int

    def post(
        self, path: str, body: bytes, headers: dict[str, str] | None = None
    ) -> tuple[int, dict[str, str], dict[str, object]]:
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        try:
            connection.request("POST", path, body, {**NDJSON, **(headers or {})})
            response = connection.getresponse()
            return response.status, dict(response.getheaders()), json.loads(response.read())
        finally:
            connection.close()

    def get(self, path: str) -> tuple[int, str]:
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        try:
            connection.request("GET", path)
            response = connection.getresponse()
            return response.status, response.read().decode()
        finally:
            connection.close()

    def requests_total(self, outcome: str, source: str = "lines") -> float:
        for family in text_string_to_metric_families(self.get("/metrics")[1]):
            for sample in family.samples:
                if sample.name == "dstreams_ingest_requests_total" and sample.labels == {
                    "source": source,
                    "outcome": outcome,
                }:
                    return sample.value
        return 0.0


def serve(routes: IngestRoutes) -> IngestServer:
    return IngestServer(IngestApp(routes, body_timeout_s=5), ServerOptions("127.0.0.1", 0))


@pytest.fixture
def endpoint() -> Iterator[Endpoint]:
    writer = ScriptedWriter()
    metrics = IngestMetrics(["lines"], process_metrics=False)
    limits = EndpointLimits(
        max_request_bytes=1000, records=Limits(5, 100), max_in_flight=1, wait_s=5
    )
    server = serve(IngestRoutes(writer, {"lines": "lines-topic"}, limits, metrics))
    port = server.start()
    try:
        yield Endpoint(writer, metrics, port)
    finally:
        if writer.hold is not None:
            writer.hold.set()
        server.stop()


def test_written_records_are_answered_200_with_their_count(endpoint: Endpoint) -> None:
    status, _, body = endpoint.post("/ingest/lines?key_field=id", b'{"id": 1}\n{"id": 2}\n')
    assert (status, body) == (200, {"records": 2, "duplicate": False})
    (request,) = endpoint.writer.received
    assert request.topic == "lines-topic" and [r.key for r in request.records] == [b"1", b"2"]
    assert endpoint.requests_total("written") == 1


def test_a_duplicate_is_200_and_says_so(endpoint: Endpoint) -> None:
    endpoint.writer.answer = Answer("duplicate", 3)
    status, _, body = endpoint.post("/ingest/lines", b"1\n", {"Idempotency-Key": "k"})
    assert (status, body) == (200, {"records": 3, "duplicate": True})
    assert endpoint.writer.received[0].key == "k"
    assert endpoint.requests_total("duplicate") == 1


def test_malformed_requests_are_400_and_never_reach_the_writer(endpoint: Endpoint) -> None:
    status, _, body = endpoint.post("/ingest/lines", b'{"id": 1}\n{oops\n')
    assert status == 400 and "line 2" in str(body["error"])
    status, _, body = endpoint.post("/ingest/lines", b"1\n", {"Idempotency-Key": "has space"})
    assert status == 400 and "Idempotency-Key" in str(body["error"])
    assert endpoint.writer.received == []
    assert endpoint.requests_total("rejected") == 2


def test_oversized_requests_are_413_and_never_reach_the_writer(endpoint: Endpoint) -> None:
    status, headers, body = endpoint.post("/ingest/lines", b"1\n" * 600)  # 1200 > 1000 bytes
    assert status == 413 and "1200 bytes" in str(body["error"])
    assert "Connection" not in headers  # read and dropped, so the connection stays usable
    status, headers, _ = endpoint.post("/ingest/lines", b"1\n" * 2500)  # over 4x: not even read
    assert status == 413 and headers.get("Connection") == "close"
    assert endpoint.post("/ingest/lines", b"1\n" * 6)[0] == 413  # 6 records > 5
    assert endpoint.post("/ingest/lines", b'"' + b"x" * 120 + b'"')[0] == 413  # record > 100
    assert endpoint.writer.received == []
    assert endpoint.requests_total("too_large") == 4


def test_unknown_sources_methods_and_types(endpoint: Endpoint) -> None:
    status, _, body = endpoint.post("/ingest/nope", b"1\n")
    # Issue #25: a 404 no longer lists the sources (it once said "known: lines").
    assert status == 404 and "lines" not in json.dumps(body)
    status, _, _ = endpoint.post(
        "/ingest/lines", b"a=1", {"Content-Type": "application/x-www-form-urlencoded"}
    )
    assert status == 415
    assert endpoint.get("/ingest/lines")[0] == 405
    assert endpoint.writer.received == []


def test_a_missing_content_length_is_411_and_a_chunked_body_is_taken(endpoint: Endpoint) -> None:
    # Issue #25: a chunked body was answered 411 (the assertion of this test once); it is taken.
    with socket.create_connection(("127.0.0.1", endpoint.port), timeout=10) as sock:
        sock.sendall(
            b"POST /ingest/lines HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-ndjson\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n2\r\n1\n\r\n0\r\n\r\n"
        )
        assert whole_reply(sock).startswith(b"HTTP/1.1 200")
        sock.sendall(b"POST /ingest/lines HTTP/1.1\r\nHost: x\r\n\r\n")
        assert whole_reply(sock).startswith(b"HTTP/1.1 411")


def whole_reply(sock: socket.socket) -> bytes:
    """One reply with a JSON body (head and body may come in separate segments)."""
    received = b""
    while not received.endswith(b"}"):
        piece = sock.recv(4096)
        if not piece:
            break
        received += piece
    return received


def test_unavailable_is_503_with_retry_after(endpoint: Endpoint) -> None:
    endpoint.writer.answer = Answer("unavailable", 1, "NOT_ENOUGH_REPLICAS: scripted")
    status, headers, body = endpoint.post("/ingest/lines", b"1\n")
    assert status == 503 and headers["Retry-After"] == "1"
    assert "NOT_ENOUGH_REPLICAS" in str(body["error"])
    assert endpoint.requests_total("unavailable") == 1


def test_in_progress_is_409_and_a_reused_key_is_422(endpoint: Endpoint) -> None:
    endpoint.writer.answer = Answer("in_progress", 1, "being written")
    status, headers, _ = endpoint.post("/ingest/lines", b"1\n", {"Idempotency-Key": "k"})
    assert status == 409 and headers["Retry-After"] == "1"
    endpoint.writer.answer = Answer("mismatch", 1, "first used for a different request")
    assert endpoint.post("/ingest/lines", b"1\n", {"Idempotency-Key": "k"})[0] == 422
    assert endpoint.requests_total("conflict") == 2


def test_more_requests_than_the_limit_are_503_at_once(endpoint: Endpoint) -> None:
    endpoint.writer.hold = threading.Event()
    first: list[int] = []
    thread = threading.Thread(
        target=lambda: first.append(endpoint.post("/ingest/lines", b"1\n")[0])
    )
    thread.start()
    while not endpoint.writer.received:
        threading.Event().wait(0.01)
    status, headers, body = endpoint.post("/ingest/lines", b"2\n")
    assert status == 503 and headers["Retry-After"] == "1" and "in flight" in str(body["error"])
    assert len(endpoint.writer.received) == 1  # the second never queued
    endpoint.writer.hold.set()
    thread.join(10)
    assert first == [200]


def test_probes_follow_the_writer(endpoint: Endpoint) -> None:
    assert endpoint.get("/readyz")[0] == 200 and endpoint.get("/healthz")[0] == 200
    endpoint.writer.ready = False
    assert endpoint.get("/readyz")[0] == 503
    endpoint.writer.healthy = False
    status, text = endpoint.get("/healthz")
    assert status == 503 and "fenced or has stopped" in text


def test_ingest_metrics_are_exposed_with_their_types(endpoint: Endpoint) -> None:
    endpoint.post("/ingest/lines", b"1\n2\n")
    families = {
        family.name: family.type
        for family in text_string_to_metric_families(endpoint.get("/metrics")[1])
        if not family.name.endswith("_created")
    }
    assert families == {
        "dstreams_ingest_requests": "counter",
        "dstreams_ingest_records": "counter",
        "dstreams_ingest_duplicates_suppressed": "counter",
        "dstreams_ingest_ack_seconds": "histogram",
        "dstreams_ingest_transactions": "counter",
        "dstreams_ingest_in_flight_requests": "gauge",
        "dstreams_ingest_ready": "gauge",
        "dstreams_ingest_idempotency_keys": "gauge",
        "dstreams_topic_under_replicated": "gauge",
        "dstreams_build_info": "gauge",
    }
    body = endpoint.get("/metrics")[1]
    assert 'dstreams_ingest_records_total{source="lines"} 2.0' in body
    assert "dstreams_ingest_ack_seconds_count 1.0" in body


def test_an_unknown_outcome_is_refused_by_the_metrics() -> None:
    with pytest.raises(ValueError, match="not one of"):
        IngestMetrics(["lines"], process_metrics=False).answered("lines", "maybe")


def test_a_record_the_sources_decoder_refuses_is_422_naming_it() -> None:
    from connectors.codecs import get_codec

    writer = ScriptedWriter()
    metrics = IngestMetrics(["lines"], process_metrics=False)
    limits = EndpointLimits(
        max_request_bytes=1000, records=Limits(5, 100), max_in_flight=1, wait_s=5
    )
    routes = IngestRoutes(writer, {"lines": "t"}, limits, metrics, {"lines": get_codec("utf-8")})
    server = serve(routes)
    endpoint = Endpoint(writer, metrics, server.start())
    try:
        status, _, body = endpoint.post(
            "/ingest/lines", b"fine\n\xff\n", {"Content-Type": "text/plain"}
        )
        assert (status, body["record"]) == (422, 1)
        assert writer.received == []
    finally:
        server.stop()


def test_records_kafka_refuses_are_413_or_422_for_that_request(endpoint: Endpoint) -> None:
    endpoint.writer.answer = Answer("too_large", 1, "a record is larger than the topic accepts")
    status, headers, body = endpoint.post("/ingest/lines", b"1\n")
    assert status == 413 and "Retry-After" not in headers and "larger" in str(body["error"])
    endpoint.writer.answer = Answer("invalid", 1, "the topic refused a record as invalid")
    assert endpoint.post("/ingest/lines", b"1\n")[0] == 422
    assert endpoint.requests_total("too_large") == 1 and endpoint.requests_total("rejected") == 1


def test_past_the_keys_bound_the_answer_is_429_with_retry_after(endpoint: Endpoint) -> None:
    endpoint.writer.answer = Answer("too_many_keys", 1, "keys bound", retry_after_s=42)
    status, headers, _ = endpoint.post("/ingest/lines", b"1\n", {"Idempotency-Key": "k"})
    assert status == 429 and headers["Retry-After"] == "42"
    assert endpoint.requests_total("throttled") == 1
