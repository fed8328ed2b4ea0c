"""Bearer tokens of the ingest endpoint (read from a directory as a Kubernetes Secret mounts it)
and TLS with and without client certificates, on loopback with a scripted writer."""

from __future__ import annotations

import http.client
import os
import ssl
from pathlib import Path

import pytest

from service.errors import ConfigError
from service.ingest import access
from service.ingest.access import TokenAccess, access_for
from service.ingest.asgi import IngestApp
from service.ingest.endpoint import EndpointLimits, IngestRoutes
from service.ingest.metrics import IngestMetrics
from service.ingest.parsing import Limits
from service.ingest.server import IngestServer, ServerOptions, TlsFiles
from tests.certificates import make_pki
from tests.unit.test_ingest_endpoint import ScriptedWriter

TOPICS = {"orders": "orders-topic", "clicks": "clicks-topic"}


def token_dir(tmp_path: Path, **tokens: str) -> Path:
    directory = tmp_path / "tokens"
    directory.mkdir()
    (directory / "..data").mkdir()  # Kubernetes' own entries are not clients
    for name, token in tokens.items():
        (directory / name).write_text(token + "\n")
    return directory


def test_tokens_allow_their_sources_only(tmp_path: Path) -> None:
    tokens = token_dir(tmp_path, shop="s3cret", admin="root-token")
    checker = TokenAccess(str(tokens), {"shop": ["orders"], "admin": ["*"]})
    assert checker.decide("Bearer s3cret", "orders") == "allowed"
    assert checker.decide("bearer s3cret", "clicks") == "forbidden"
    assert checker.decide("Bearer s3cret", "no-such-source") == "forbidden"
    assert checker.decide("Bearer root-token", "clicks") == "allowed"
    for header in (None, "", "Bearer", "Basic s3cret", "Bearer wrong", "s3cret"):
        assert checker.decide(header, "orders") == "unauthenticated"


def test_a_rotated_token_takes_effect_without_a_restart(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(access, "RECHECK_S", 0.0)
    tokens = token_dir(tmp_path, shop="old")
    checker = TokenAccess(str(tokens), {"shop": ["orders"]})
    (tokens / "shop").write_text("new")
    os.utime(tokens / "shop", (1, 1))  # a different stamp whatever the clock's resolution
    assert checker.decide("Bearer new", "orders") == "allowed"
    assert checker.decide("Bearer old", "orders") == "unauthenticated"


def test_token_files_without_a_client_entry_or_a_directory_are_refused(tmp_path: Path) -> None:
    tokens = token_dir(tmp_path, stranger="t")
    with pytest.raises(ConfigError, match="'stranger'.*ingest.auth.clients"):
        access_for(str(tokens), {})
    with pytest.raises(ConfigError, match="not a directory"):
        access_for(str(tmp_path / "missing"), {})


# --- over HTTP and TLS -------------------------------------------------------------------------


def serve(tmp_path: Path, tls: TlsFiles | None = None) -> tuple[ScriptedWriter, IngestServer]:
    writer = ScriptedWriter()
    limits = EndpointLimits(1000, Limits(5, 100), max_in_flight=4, wait_s=5)
    checker = TokenAccess(str(token_dir(tmp_path, shop="s3cret")), {"shop": ["orders"]})
    metrics = IngestMetrics(sorted(TOPICS), process_metrics=False)
    routes = IngestRoutes(writer, TOPICS, limits, metrics, access=checker)
    return writer, IngestServer(IngestApp(routes, 5), ServerOptions("127.0.0.1", 0, tls=tls))


def post(
    connection: http.client.HTTPConnection, source: str, token: str | None
) -> tuple[int, dict[str, str], bytes]:
    headers = {"Content-Type": "text/plain"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    try:
        connection.request("POST", f"/ingest/{source}", b"1", headers)
        response = connection.getresponse()
        return response.status, dict(response.getheaders()), response.read()
    finally:
        connection.close()


def test_401_and_403_tell_nothing_of_which_sources_exist(tmp_path: Path) -> None:
    writer, server = serve(tmp_path)
    port = server.start()
    try:

        def attempt(source: str, token: str | None) -> tuple[int, dict[str, str], bytes]:
            return post(http.client.HTTPConnection("127.0.0.1", port, timeout=5), source, token)

        status, headers, body = attempt("orders", None)
        assert status == 401 and headers["WWW-Authenticate"].startswith("Bearer")
        assert attempt("no-such", None)[:1] + attempt("orders", "wrong")[:1] == (401, 401)
        forbidden, missing = attempt("clicks", "s3cret"), attempt("no-such", "s3cret")
        assert forbidden[0] == missing[0] == 403 and forbidden[2] == missing[2]
        assert attempt("orders", "s3cret")[0] == 200
        assert [r.source for r in writer.received] == ["orders"]
    finally:
        server.stop()


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    pytest.importorskip("cryptography")
    return make_pki(tmp_path_factory.mktemp("pki"))


def test_tls_handshake_and_plain_http_refused(tmp_path: Path, pki: dict[str, Path]) -> None:
    _, server = serve(tmp_path, TlsFiles(str(pki["server"]), str(pki["server-key"])))
    port = server.start()
    try:
        context = ssl.create_default_context(cafile=str(pki["ca"]))
        secure = http.client.HTTPSConnection("127.0.0.1", port, timeout=5, context=context)
        assert post(secure, "orders", "s3cret")[0] == 200
        plain = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        with pytest.raises((OSError, http.client.HTTPException)):
            post(plain, "orders", "s3cret")
    finally:
        server.stop()


def test_mutual_tls_needs_a_client_certificate_from_the_ca(
    tmp_path: Path, pki: dict[str, Path]
) -> None:
    tls = TlsFiles(str(pki["server"]), str(pki["server-key"]), client_ca=str(pki["ca"]))
    _, server = serve(tmp_path, tls)
    port = server.start()
    try:
        anonymous = ssl.create_default_context(cafile=str(pki["ca"]))
        with pytest.raises((ssl.SSLError, OSError, http.client.HTTPException)):
            connection = http.client.HTTPSConnection(
                "127.0.0.1", port, timeout=5, context=anonymous
            )
            post(connection, "orders", "s3cret")
        known = ssl.create_default_context(cafile=str(pki["ca"]))
        known.load_cert_chain(str(pki["client"]), str(pki["client-key"]))
        connection = http.client.HTTPSConnection("127.0.0.1", port, timeout=5, context=known)
        assert post(connection, "orders", "s3cret")[0] == 200
    finally:
        server.stop()
