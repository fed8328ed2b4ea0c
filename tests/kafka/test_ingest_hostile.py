"""The ingest endpoint against hostile clients, as it runs: a real broker, TLS with client
certificates, bearer tokens, and a source with the strict `json` codec (issue #25's suite).

One endpoint serves the whole module (`IngestService` on a free port, short head and body
deadlines so that the slow-client cases end quickly). Whatever a test sends, "nothing written"
is checked on the topic's high watermarks: not one record, committed or aborted, reached it.
"""

from __future__ import annotations

import http.client
import json
import resource
import socket
import ssl
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition

from connectors.kafka_client import end_offsets
from service.config.settings import Settings
from service.dev.brokers import create_topic
from service.ingest.app import IngestService
from tests.certificates import make_pki

TOKEN = "writer-token-0123456789"
OTHER_TOKEN = "audit-token-9876543210"
OPS_TOKEN = "ops-token-5555555555"
HEAD_TIMEOUT_MS = 3_000
BODY_TIMEOUT_MS = 3_000
MAX_REQUEST_BYTES = 1 << 20
LEAKS = (b"Traceback", b'File "', b".py", b"librdkafka", b"/tmp", b"/work", b"rdkafka")


@dataclass
class Endpoint:
    service: IngestService
    port: int
    topic: str
    bootstrap: str
    pki: dict[str, Path]

    def context(self, *, client_cert: bool = True) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=str(self.pki["ca"]))
        if client_cert:
            context.load_cert_chain(str(self.pki["client"]), str(self.pki["client-key"]))
        return context

    def connect(self, *, timeout: float = 10) -> ssl.SSLSocket:
        raw = socket.create_connection(("127.0.0.1", self.port), timeout=timeout)
        return self.context().wrap_socket(raw, server_hostname="127.0.0.1")

    def post(
        self,
        body: bytes,
        *,
        source: str = "events",
        token: str | None = TOKEN,
        content_type: str = "application/x-ndjson",
        key: str | None = None,
        timeout: float = 20,
    ) -> tuple[int, dict[str, str], bytes]:
        headers = {"Content-Type": content_type}
        if token is not None:
            headers["Authorization"] = f"Bearer {token}"
        if key is not None:
            headers["Idempotency-Key"] = key
        connection = http.client.HTTPSConnection(
            "127.0.0.1", self.port, timeout=timeout, context=self.context()
        )
        try:
            connection.request("POST", f"/ingest/{source}", body, headers)
            response = connection.getresponse()
            return response.status, dict(response.getheaders()), response.read()
        finally:
            connection.close()

    def raw(self, data: bytes) -> bytes:
        """Send `data` as it is, over TLS; the bytes answered until the server closes or pauses."""
        with self.connect() as sock:
            sock.sendall(data)
            return read_answer(sock)

    def watermarks(self) -> list[int]:
        """The partition's end (aborted and open transactions included) once it has settled:
        a commit's marker lands a moment after the commit returned."""
        consumer = Consumer(
            {
                "bootstrap.servers": self.bootstrap,
                "group.id": f"{self.topic}-m",
                "isolation.level": "read_uncommitted",
            }
        )
        try:
            deadline = time.monotonic() + 30
            previous = None
            while True:
                ends = [end_offsets(consumer, TopicPartition(self.topic, 0), deadline)[1]]
                if ends == previous:
                    return ends
                previous = ends
                time.sleep(0.5)
        finally:
            consumer.close()


def read_answer(sock: socket.socket) -> bytes:
    received = b""
    try:
        while True:
            piece = sock.recv(65536)
            if not piece:
                break
            received += piece
            head, _, body = received.partition(b"\r\n\r\n")
            length = next(
                (
                    int(line.split(b":", 1)[1])
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length:")
                ),
                None,
            )
            if length is not None and len(body) >= length:
                break
    except (TimeoutError, ssl.SSLError, ConnectionError):
        pass
    return received


@pytest.fixture(scope="module")
def endpoint(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Endpoint]:
    pytest.importorskip("cryptography")
    name = f"hostile_{uuid.uuid4().hex[:8]}"
    topic = create_topic(kafka_bootstrap, name, partitions=1)
    other = create_topic(kafka_bootstrap, f"{name}_audit", partitions=1)
    pki = make_pki(tmp_path_factory.mktemp("pki"))
    tokens = tmp_path_factory.mktemp("tokens")
    (tokens / "writer").write_text(TOKEN)
    (tokens / "auditor").write_text(OTHER_TOKEN)
    (tokens / "ops").write_text(OPS_TOKEN)
    settings = Settings.model_validate(
        {
            "app_id": name.replace("_", "-"),
            "job": "examples.wordcount:build",
            "kafka": {"bootstrap_servers": kafka_bootstrap, "require_replication": False},
            "sources": {
                "events": {"topics": [topic], "codec": "json"},
                "audit": {"topics": [other]},
            },
            "ingest": {
                "host": "127.0.0.1",
                "port": 0,
                "ack_timeout_ms": 10_000,
                "header_timeout_ms": HEAD_TIMEOUT_MS,
                "body_timeout_ms": BODY_TIMEOUT_MS,
                "max_request_bytes": MAX_REQUEST_BYTES,
                "tls": {
                    "cert_file": str(pki["server"]),
                    "key_file": str(pki["server-key"]),
                    "client_ca_file": str(pki["ca"]),
                },
                "auth": {
                    "tokens_dir": str(tokens),
                    "clients": {"writer": ["events"], "auditor": ["audit"], "ops": ["*"]},
                },
            },
        }
    )
    service = IngestService(settings)
    port = service.start()
    deadline = time.monotonic() + 60
    while not (service.writer and service.writer.ready):
        assert time.monotonic() < deadline, "the ingest writer did not become ready"
        time.sleep(0.05)
    try:
        yield Endpoint(service, port, topic, kafka_bootstrap, pki)
    finally:
        service.stop()


def assert_no_leak(answer: bytes) -> None:
    for leak in LEAKS:
        assert leak not in answer, (leak, answer)


def still_serving(endpoint: Endpoint) -> None:
    status, _, _ = endpoint.post(b'{"alive": true}\n')
    assert status == 200


# --- validation at the door ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "body", "content_type"),
    [
        ("BOM", b'\xef\xbb\xbf{"id": 1}\n', "application/x-ndjson"),
        ("UTF-16", '{"id": 1}'.encode("utf-16"), "application/json"),
        ("UTF-16 as bytes", '{"id": 1}'.encode("utf-16-le"), "application/octet-stream"),
        ("NaN", b'{"id": 1}\n{"price": NaN}\n', "application/x-ndjson"),
        ("1e999", b'{"price": 1e999}\n', "application/x-ndjson"),
        ("lone surrogate", b'{"name": "\\ud800"}\n', "application/x-ndjson"),
        ("NUL", b'{"name": "a\\u0000b"}\n', "application/x-ndjson"),
        ("deep nesting", b"[" * 100_000 + b"]" * 100_000, "application/json"),
    ],
)
def test_records_the_job_could_not_decode_are_4xx_and_nothing_is_written(
    endpoint: Endpoint, name: str, body: bytes, content_type: str
) -> None:
    before = endpoint.watermarks()
    status, _, answer = endpoint.post(body, content_type=content_type)
    assert status in (400, 413, 422), (name, status, answer)
    assert_no_leak(answer)
    if status != 413:
        assert "record" in json.loads(answer), answer
    assert endpoint.watermarks() == before
    still_serving(endpoint)


def test_a_key_reused_with_another_body_is_422_and_the_first_body_stays(
    endpoint: Endpoint,
) -> None:
    key = f"k-{uuid.uuid4().hex}"
    assert endpoint.post(b'{"n": 1}\n', key=key)[0] == 200
    after_first = endpoint.watermarks()
    status, _, answer = endpoint.post(b'{"n": 2}\n', key=key)
    assert status == 422 and b"different request" in answer
    assert endpoint.watermarks() == after_first
    status, _, answer = endpoint.post(b'{"n": 1}\n', key=key)
    assert status == 200 and json.loads(answer)["duplicate"] is True


# --- framing --------------------------------------------------------------------------------------

HEAD = (
    b"POST /ingest/events HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-ndjson\r\n"
    b"Authorization: Bearer " + TOKEN.encode() + b"\r\n"
)


def test_content_length_with_transfer_encoding_is_400(endpoint: Endpoint) -> None:
    before = endpoint.watermarks()
    answer = endpoint.raw(
        HEAD
        + b"Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n"
        + b'9\r\n{"a": 1}\n\r\n0\r\n\r\n'
    )
    assert answer.startswith(b"HTTP/1.1 400"), answer
    assert endpoint.watermarks() == before


def test_a_chunked_body_is_written(endpoint: Endpoint) -> None:
    before = endpoint.watermarks()
    record = b'{"chunked": true}\n'
    answer = endpoint.raw(
        HEAD + b"Transfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n" % (len(record), record)
    )
    assert answer.startswith(b"HTTP/1.1 200"), answer
    assert endpoint.watermarks()[0] > before[0]


def test_a_non_ascii_content_length_is_400_and_the_server_goes_on(endpoint: Endpoint) -> None:
    answer = endpoint.raw(HEAD + "Content-Length: \u00b2\r\n\r\n{}".encode())
    assert answer.startswith(b"HTTP/1.1 400"), answer
    assert_no_leak(answer)
    still_serving(endpoint)


def test_an_oversize_content_length_is_413_before_the_body_is_sent(endpoint: Endpoint) -> None:
    with endpoint.connect() as sock:
        sock.sendall(HEAD + b"Content-Length: 1000000000\r\n\r\n")  # and not one byte of body
        answer = read_answer(sock)
    assert answer.startswith(b"HTTP/1.1 413"), answer


def test_an_unknown_source_is_404_without_the_list_and_nothing_leaks(
    endpoint: Endpoint,
) -> None:
    # The writer's token may write to "events" only: "audit" exists, "nope" does not; both 403.
    forbidden, missing = endpoint.post(b"1\n", source="audit"), endpoint.post(b"1\n", source="nope")
    assert forbidden[0] == missing[0] == 403 and forbidden[2] == missing[2]
    for answer in (forbidden[2], missing[2]):
        assert b"events" not in answer and b"audit" not in answer
    assert endpoint.post(b"1\n", source="nope", token=OTHER_TOKEN)[0] == 403
    # Only a client allowed every source learns that one does not exist, and not the others.
    status, _, answer = endpoint.post(b"1\n", source="nope", token=OPS_TOKEN)
    assert status == 404 and b"events" not in answer and b"audit" not in answer
    for request in (
        HEAD + b"Content-Length: 7\r\n\r\n{oops}\n",
        b"GET /nothing HTTP/1.1\r\nHost: x\r\n\r\n",
        b"POST /ingest/events HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}",
        b"\x16\x03\x01garbage\r\n\r\n",
    ):
        answer = endpoint.raw(request)
        assert answer.startswith(b"HTTP/1.1 4"), answer
        assert_no_leak(answer)
        assert b"events" not in answer.partition(b"\r\n\r\n")[2]


# --- authentication and TLS -------------------------------------------------------------------


def test_no_token_or_a_wrong_one_is_401_and_a_source_not_allowed_403(endpoint: Endpoint) -> None:
    before = endpoint.watermarks()
    status, headers, _ = endpoint.post(b'{"a": 1}\n', token=None)
    assert status == 401 and headers["WWW-Authenticate"].startswith("Bearer")
    assert endpoint.post(b'{"a": 1}\n', token="guess")[0] == 401
    assert endpoint.post(b'{"a": 1}\n', token=OTHER_TOKEN)[0] == 403
    assert endpoint.watermarks() == before


def test_tls_needs_a_client_certificate_and_plain_http_is_refused(endpoint: Endpoint) -> None:
    with pytest.raises((ssl.SSLError, ConnectionError)):
        raw = socket.create_connection(("127.0.0.1", endpoint.port), timeout=10)
        with endpoint.context(client_cert=False).wrap_socket(raw, server_hostname="127.0.0.1") as s:
            s.sendall(HEAD + b"Content-Length: 3\r\n\r\n{}\n")
            if not s.recv(100):
                closed = "closed without an answer"
                raise ConnectionError(closed)
    with socket.create_connection(("127.0.0.1", endpoint.port), timeout=10) as plain:
        plain.sendall(HEAD + b"Content-Length: 3\r\n\r\n{}\n")
        assert not read_answer(plain).startswith(b"HTTP/1.1 200")
    with endpoint.connect() as secure:
        assert secure.version() in ("TLSv1.2", "TLSv1.3")
        secure.sendall(HEAD + b"Content-Length: 3\r\n\r\n{}\n")
        assert read_answer(secure).startswith(b"HTTP/1.1 200")


# --- slow and idle clients ----------------------------------------------------------------------


def test_slow_clients_trickling_bodies_leave_others_served(endpoint: Endpoint) -> None:
    slow = [endpoint.connect() for _ in range(64)]
    normal: list[tuple[int, float]] = []

    def normal_client() -> None:
        started = time.monotonic()
        status = endpoint.post(b'{"normal": 1}\n', timeout=5)[0]
        normal.append((status, time.monotonic() - started))

    try:
        for sock in slow:
            sock.sendall(HEAD + b"Content-Length: 1000\r\n\r\n{")
        other = threading.Thread(target=normal_client)
        other.start()
        # A byte every 0.5 s from each (each read is quick; the whole body never arrives),
        # stopped before the body deadline so that the 408 answers are not reset by late bytes.
        for _ in range(int(BODY_TIMEOUT_MS / 500) - 1):
            time.sleep(0.5)
            for sock in slow:
                sock.sendall(b" ")
        other.join(10)
        assert normal and normal[0][0] == 200 and normal[0][1] < 5, normal
        answers = [read_answer(sock) for sock in slow]
        assert all(a.startswith(b"HTTP/1.1 408") for a in answers), answers[:3]
    finally:
        for sock in slow:
            sock.close()


def test_two_thousand_idle_connections_leave_others_served(endpoint: Endpoint) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    # The endpoint runs in this process: each idle connection costs two descriptors here.
    if soft < 5_000:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 10_000), hard))
    idle = []
    try:
        for _ in range(2_000):
            idle.append(socket.create_connection(("127.0.0.1", endpoint.port), timeout=10))
        started = time.monotonic()
        status, _, _ = endpoint.post(b'{"normal": 2}\n', timeout=5)
        assert status == 200 and time.monotonic() - started < 5
    finally:
        for sock in idle:
            sock.close()
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
