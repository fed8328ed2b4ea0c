"""The service's HTTP endpoint: metrics, probes, status JSON and the status page.

One small threaded stdlib server on a background thread:

- `/metrics`  Prometheus exposition of `Metrics.registry` (OpenMetrics when the scraper asks).
- `/healthz`  200 while the scheduler's heartbeat is recent, 503 when it is wedged (liveness).
- `/readyz`   200 once `StatusBoard.set_ready(True)` was called, else 503 (readiness).
- `/status`   the board's JSON snapshot.
- `/`         the self-contained HTML status page (service.observe.status_page).

Handlers only read the board and the registry, both thread-safe, so requests need no locking.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

from prometheus_client.exposition import choose_encoder

from service.observe.metrics import Metrics
from service.observe.status import StatusBoard
from service.observe.status_page import CONTENT_SECURITY_POLICY, PAGE

_log = logging.getLogger(__name__)

Response = tuple[int, str, bytes]
_TEXT = "text/plain; charset=utf-8"
_JSON = "application/json"
_HTML = "text/html; charset=utf-8"


class _Server(ThreadingHTTPServer):
    """Carries the board and metrics to the handlers; request threads never block shutdown."""

    daemon_threads = True
    board: StatusBoard
    metrics: Metrics


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    server_version = "dstreams"

    def do_GET(self) -> None:  # noqa: N802 - the name http.server dispatches to
        self._respond(include_body=True)

    def do_HEAD(self) -> None:  # noqa: N802
        self._respond(include_body=False)

    def _respond(self, include_body: bool) -> None:
        route = _ROUTES.get(urlsplit(self.path).path)
        try:
            status, content_type, body = route(self) if route else _not_found(self)
        except Exception:
            _log.exception("GET %s failed", self.path)
            status, content_type, body = 500, _TEXT, b"internal error; see the service log\n"
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.send_header("X-Content-Type-Options", "nosniff")
        if content_type == _HTML:
            self.send_header("Content-Security-Policy", CONTENT_SECURITY_POLICY)
        self.end_headers()
        if include_body:
            self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        # Scrapes and probes arrive every few seconds; keep them out of the service log.
        _log.debug("%s %s", self.address_string(), format % args)


def _metrics(handler: _Handler) -> Response:
    encoder, content_type = choose_encoder(handler.headers.get("Accept", ""))
    return 200, content_type, encoder(handler.server.metrics.registry)


def _healthz(handler: _Handler) -> Response:
    healthy, why = handler.server.board.healthy()
    return (200 if healthy else 503), _TEXT, f"{'ok' if healthy else 'wedged'}: {why}\n".encode()


def _readyz(handler: _Handler) -> Response:
    if handler.server.board.ready:
        return 200, _TEXT, b"ready\n"
    return 503, _TEXT, b"not ready: recovering or waiting for the first batch to complete\n"


def _status(handler: _Handler) -> Response:
    return 200, _JSON, json.dumps(handler.server.board.snapshot()).encode()


def _page(handler: _Handler) -> Response:
    return 200, _HTML, PAGE.encode()


def _not_found(handler: _Handler) -> Response:
    paths = ", ".join(sorted(_ROUTES))
    return 404, _TEXT, f"no such page; try one of {paths}\n".encode()


_ROUTES: dict[str, Callable[[_Handler], Response]] = {
    "/": _page,
    "/metrics": _metrics,
    "/healthz": _healthz,
    "/readyz": _readyz,
    "/status": _status,
}


class HttpServer:
    """Serves `board` and `metrics` on `host:port` (port 0: any free port) from a daemon thread.

    >>> server = HttpServer(board, metrics, "127.0.0.1", 0)   # doctest: +SKIP
    >>> port = server.start()                                   # doctest: +SKIP
    >>> server.stop()                                           # doctest: +SKIP
    """

    def __init__(self, board: StatusBoard, metrics: Metrics, host: str, port: int) -> None:
        self._board = board
        self._metrics = metrics
        self._address = (host, port)
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> int:
        """Bind and serve in the background; returns the bound port."""
        if self._server is not None:
            msg = "HttpServer.start() called twice; stop() it first"
            raise RuntimeError(msg)
        server = _Server(self._address, _Handler)
        server.board = self._board
        server.metrics = self._metrics
        thread = threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.2}, name="dstreams-http"
        )
        thread.daemon = True  # the driver's exit must not wait for the status endpoint
        thread.start()
        self._server, self._thread = server, thread
        port = self.port
        _log.info("serving /metrics, /healthz, /readyz, /status and / on port %d", port)
        return port

    @property
    def port(self) -> int:
        if self._server is None:
            msg = "HttpServer is not started"
            raise RuntimeError(msg)
        return int(self._server.server_address[1])

    def stop(self) -> None:
        """Stop serving and release the port; a no-op when not started."""
        server, thread = self._server, self._thread
        self._server = self._thread = None
        if server is None:
            return
        server.shutdown()
        server.server_close()
        if thread is not None:
            thread.join(timeout=5)
