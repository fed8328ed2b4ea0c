"""The ingest endpoint's HTTP side against hostile clients, on loopback with a scripted writer.

Framing, deadlines and limits (`service.ingest.asgi`, `service.ingest.server`): raw sockets say
exactly what a careless or hostile client sends. The same cases against a real broker, with
nothing written, are in tests/kafka/test_ingest_hostile.py.
"""

from __future__ import annotations

import http.client
import socket
import time
from collections.abc import Iterator

import pytest

from service.ingest.asgi import IngestApp
from service.ingest.endpoint import EndpointLimits, IngestRoutes
from service.ingest.metrics import IngestMetrics
from service.ingest.parsing import Limits
from service.ingest.server import IngestServer, ServerOptions
from tests.unit.test_ingest_endpoint import ScriptedWriter

HEAD = b"POST /ingest/lines HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-ndjson\r\n"


def new_server(writer: ScriptedWriter) -> IngestServer:
    metrics = IngestMetrics(["lines"], process_metrics=False)
    limits = EndpointLimits(
        max_request_bytes=1000, records=Limits(5, 100), max_in_flight=4, wait_s=5
    )
    routes = IngestRoutes(writer, {"lines": "lines-topic"}, limits, metrics)
    options = ServerOptions("127.0.0.1", 0, header_timeout_s=1.0, body_timeout_s=1.0)
    return IngestServer(IngestApp(routes, options.body_timeout_s), options)


@pytest.fixture
def served() -> Iterator[tuple[ScriptedWriter, int]]:
    writer = ScriptedWriter()
    server = new_server(writer)
    port = server.start()
    try:
        yield writer, port
    finally:
        server.stop()


def exchange(port: int, data: bytes, *, wait_s: float = 5) -> bytes:
    """Send `data`, then read until the server closes or stops sending for a moment."""
    with socket.create_connection(("127.0.0.1", port), timeout=wait_s) as sock:
        sock.sendall(data)
        return read_reply(sock)


def read_reply(sock: socket.socket) -> bytes:
    received = b""
    try:
        while b"\r\n\r\n" not in received or not received.rstrip().endswith((b"}", b"\n")):
            piece = sock.recv(65536)
            if not piece:
                break
            received += piece
    except TimeoutError:
        pass
    return received


def still_serving(port: int) -> bool:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        connection.request("POST", "/ingest/lines", b"1\n", {"Content-Type": "text/plain"})
        return connection.getresponse().status == 200
    finally:
        connection.close()


def test_content_length_with_transfer_encoding_is_400_and_closes(
    served: tuple[ScriptedWriter, int],
) -> None:
    writer, port = served
    reply = exchange(
        port,
        HEAD + b"Content-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n1\n\r\n0\r\n\r\n",
    )
    assert reply.startswith(b"HTTP/1.1 400") and b"Connection: close" in reply
    assert writer.received == [] and still_serving(port)


@pytest.mark.parametrize("length", ["\u00b2".encode(), b"1_0", b"-1", b"0x10", b"1" * 30])
def test_a_content_length_that_is_not_ascii_digits_is_400(
    served: tuple[ScriptedWriter, int], length: bytes
) -> None:
    writer, port = served
    reply = exchange(port, HEAD + b"Content-Length: " + length + b"\r\n\r\n1\n")
    assert reply.startswith(b"HTTP/1.1 400")
    assert writer.received == [] and still_serving(port)


def test_an_oversize_content_length_is_413_before_the_body_is_sent(
    served: tuple[ScriptedWriter, int],
) -> None:
    writer, port = served
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(HEAD + b"Content-Length: 10000000\r\n\r\n")  # and nothing more
        reply = read_reply(sock)
    assert reply.startswith(b"HTTP/1.1 413") and b"Connection: close" in reply
    assert writer.received == []


def test_a_chunked_body_over_the_limit_is_413(served: tuple[ScriptedWriter, int]) -> None:
    writer, port = served
    chunk = b"1\n" * 300
    body = b"".join(b"%x\r\n%s\r\n" % (len(chunk), chunk) for _ in range(3)) + b"0\r\n\r\n"
    reply = exchange(port, HEAD + b"Transfer-Encoding: chunked\r\n\r\n" + body)
    assert reply.startswith(b"HTTP/1.1 413") and writer.received == []


def test_a_body_slower_than_its_deadline_is_408_and_others_are_served(
    served: tuple[ScriptedWriter, int],
) -> None:
    writer, port = served
    slow = [socket.create_connection(("127.0.0.1", port), timeout=5) for _ in range(8)]
    try:
        for sock in slow:
            sock.sendall(HEAD + b"Content-Length: 100\r\n\r\n1")
        assert still_serving(port)  # the slow ones hold no slot
        started = time.monotonic()
        replies = [read_reply(sock) for sock in slow]
        assert all(reply.startswith(b"HTTP/1.1 408") for reply in replies)
        assert time.monotonic() - started < 4
    finally:
        for sock in slow:
            sock.close()
    assert len(writer.received) == 1


def test_a_head_slower_than_its_deadline_closes_the_connection(
    served: tuple[ScriptedWriter, int],
) -> None:
    _, port = served
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(b"POST /ingest/lines HTTP/1.1\r\nHost: x\r\n")
        started = time.monotonic()
        for _ in range(10):  # a byte every 0.2 s: each recv is quick, the whole head is not
            try:
                sock.sendall(b"X")
            except OSError:
                break
            time.sleep(0.2)
        assert sock.recv(100) == b""
        assert time.monotonic() - started < 3
    assert still_serving(port)


def test_deep_nesting_is_400_and_the_server_goes_on(served: tuple[ScriptedWriter, int]) -> None:
    writer, port = served
    body = b"[" * 900 + b"]" * 900
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        connection.request("POST", "/ingest/lines", body, {"Content-Type": "application/json"})
        response = connection.getresponse()
        assert response.status in (400, 413) and b"Traceback" not in response.read()
    finally:
        connection.close()
    assert writer.received == [] and still_serving(port)


def test_no_answer_carries_a_traceback_or_a_path(served: tuple[ScriptedWriter, int]) -> None:
    _, port = served
    requests = [
        HEAD + b"Content-Length: 5\r\n\r\n{oops",
        b"POST /ingest/nope HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n1\n",
        b"GET /ingest/lines HTTP/1.1\r\nHost: x\r\n\r\n",
        b"BREW /\x00 HTTP/1.1\r\n\r\n",
        HEAD + b"Content-Length: \xb2\r\n\r\n",
    ]
    for request in requests:
        reply = exchange(port, request)
        assert reply.startswith(b"HTTP/1.1 4"), reply
        for leak in (b"Traceback", b'File "', b".py", b"lines-topic", b"/work"):
            assert leak not in reply, (request, reply)


def test_connections_send_without_nagles_delay() -> None:
    # An answer is two writes (head, body): with Nagle's algorithm the body would wait for the
    # client's delayed acknowledgement of the head.
    server = new_server(ScriptedWriter())
    port = server.start()
    try:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        connection.request("GET", "/healthz")
        assert connection.getresponse().read() == b"ok\n"  # kept alive: still open below
        assert server._server is not None
        (protocol,) = server._server.server_state.connections
        sock = protocol.transport.get_extra_info("socket")
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0
        connection.close()
    finally:
        server.stop()
