"""The service's HTTP endpoint: metrics, probes, status JSON and the status page.

One small threaded stdlib server on a background thread:

- `/metrics`  Prometheus exposition of `Metrics.registry` (OpenMetrics when the scraper asks).
- `/healthz`  200 while the scheduler's heartbeat is recent, 503 when it is wedged (liveness).
- `/readyz`   200 once `StatusBoard.set_ready(True)` was called, else 503 (readiness).
- `/startupz` 200 once the first batch after recovery completed, or while a warm standby waits;
              503 with the phase and the recovery's progress before (Kubernetes' startup probe).
- `/status`   the board's JSON snapshot.
- `/state/<name>/<key>`, `/state/<name>?prefix=<p>&limit=<n>`  live queries of the keyed states
              the job made queryable, as of the last completed batch
              (service.observe.state_routes).
- `/`         the self-contained HTML status page (service.observe.status_page).

Handlers only read the board, the registry and the published states, all thread-safe, so
requests need no locking.
`RoutedServer` is the server itself, serving any `Router` (a function from `Request` to `Reply`).
It is for operators' tools on a trusted network; the client-facing ingest endpoint runs on
uvicorn instead (`service.ingest.server`) and shares only the `Reply` helpers.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from email.message import Message
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder

from service.observe import state_routes
from service.observe.metrics import Metrics
from service.observe.status import StatusBoard
from service.observe.status_page import CONTENT_SECURITY_POLICY, PAGE

_log = logging.getLogger(__name__)

_TEXT = "text/plain; charset=utf-8"
_JSON = "application/json"
_HTML = "text/html; charset=utf-8"
# An idle keep-alive connection holds a thread; it is closed after this long without a request.
IDLE_CONNECTION_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class Request:
    """One HTTP request as a router sees it; the body is read only if the router asks."""

    method: str
    path: str
    query: dict[str, str]
    """The first value of each query parameter."""
    headers: Message
    read_body: Callable[[int], bytes]
    """Reads exactly that many bytes of the body (fewer only if the client hung up)."""

    @property
    def content_length(self) -> int | None:
        """The declared body length; None when missing or not a number."""
        value = self.headers.get("Content-Length")
        return int(value) if value is not None and value.strip().isdigit() else None


@dataclass(frozen=True)
class Reply:
    status: int
    content_type: str
    body: bytes
    headers: tuple[tuple[str, str], ...] = ()


Router = Callable[[Request], Reply]


def text_reply(status: int, text: str, *headers: tuple[str, str]) -> Reply:
    return Reply(status, _TEXT, text.encode(), headers)


def json_reply(status: int, document: object, *headers: tuple[str, str]) -> Reply:
    return Reply(status, _JSON, json.dumps(document).encode(), headers)


def metrics_reply(registry: CollectorRegistry, accept: str) -> Reply:
    """The registry in the exposition format the scraper's Accept header asks for."""
    encoder, content_type = choose_encoder(accept)
    return Reply(200, content_type, encoder(registry))


class _Server(ThreadingHTTPServer):
    """Carries the router to the handlers; request threads never block shutdown."""

    daemon_threads = True
    # socketserver's default backlog of 5 resets connections when many clients connect at once.
    request_queue_size = 128
    router: Router
    # The server's log name for failed requests.
    label: str


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    server_version = "dstreams"
    timeout = IDLE_CONNECTION_TIMEOUT_S

    def do_GET(self) -> None:  # noqa: N802 - the name http.server dispatches to
        self._dispatch("GET", include_body=True)

    def do_HEAD(self) -> None:  # noqa: N802
        self._dispatch("HEAD", include_body=False)

    def do_POST(self) -> None:  # noqa: N802
        self._dispatch("POST", include_body=True)

    def do_PUT(self) -> None:  # noqa: N802
        self._dispatch("PUT", include_body=True)

    def _dispatch(self, method: str, include_body: bool) -> None:
        split = urlsplit(self.path)
        # Blank values kept: `?prefix=` asks for every key of a state.
        parsed = parse_qs(split.query, keep_blank_values=True)
        query = {key: values[0] for key, values in parsed.items()}
        self._body_read = 0
        request = Request(method, split.path, query, self.headers, self._read_body)
        try:
            reply = self.server.router(request)
        except Exception:
            _log.exception("%s %s %s failed", self.server.label, method, self.path)
            reply = text_reply(500, "internal error; see the service log\n")
        declared = request.content_length
        chunked = declared is None and self.headers.get("Transfer-Encoding") is not None
        if chunked or self._body_read < (declared or 0):
            # An unread body would be taken for the next request on a kept-alive connection.
            self.close_connection = True
        self._send(reply, include_body)

    def _read_body(self, size: int) -> bytes:
        data = self.rfile.read(size)
        self._body_read += len(data)
        return data

    def _send(self, reply: Reply, include_body: bool) -> None:
        self.send_response(reply.status)
        self.send_header("Content-Type", reply.content_type)
        self.send_header("Content-Length", str(len(reply.body)))
        self.send_header("Cache-Control", "no-store")
        self.send_header("X-Content-Type-Options", "nosniff")
        if reply.content_type == _HTML:
            self.send_header("Content-Security-Policy", CONTENT_SECURITY_POLICY)
        for name, value in reply.headers:
            self.send_header(name, value)
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        if include_body:
            self.wfile.write(reply.body)

    def log_message(self, format: str, *args: object) -> None:
        # Scrapes and probes arrive every few seconds; keep them out of the service log.
        _log.debug("%s %s", self.address_string(), format % args)


class _KeepAliveHandler(_Handler):
    # HTTP/1.1 keeps connections open between requests (every reply has a Content-Length).
    protocol_version = "HTTP/1.1"


class RoutedServer:
    """Serves `router` on `host:port` (port 0: any free port) from a daemon thread.

    `keep_alive` answers HTTP/1.1 and keeps connections open between requests (clients that
    send many requests, e.g. to the ingest endpoint); otherwise each connection takes one.
    """

    def __init__(
        self, router: Router, host: str, port: int, *, label: str = "http", keep_alive: bool = False
    ) -> None:
        self._router = router
        self._address = (host, port)
        self._label = label
        self._handler = _KeepAliveHandler if keep_alive else _Handler
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> int:
        """Bind and serve in the background; returns the bound port."""
        if self._server is not None:
            msg = f"{type(self).__name__}.start() called twice; stop() it first"
            raise RuntimeError(msg)
        server = _Server(self._address, self._handler)
        server.router = self._router
        server.label = self._label
        thread = threading.Thread(
            target=server.serve_forever,
            kwargs={"poll_interval": 0.2},
            name=f"dstreams-{self._label}",
        )
        thread.daemon = True  # the process's exit must not wait for its HTTP endpoint
        thread.start()
        self._server, self._thread = server, thread
        return self.port

    @property
    def port(self) -> int:
        if self._server is None:
            msg = f"{type(self).__name__} is not started"
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


# --- the driver's routes ----------------------------------------------------------------------


StateQueriesSource = Callable[[], state_routes.StateQueries | None]
"""The graph's queryable states once the driver has built the job's graph (None before)."""


def _no_state_queries() -> None:
    return None


class _DriverRoutes:
    def __init__(
        self, board: StatusBoard, metrics: Metrics, state_queries: StateQueriesSource
    ) -> None:
        self.board = board
        self.metrics = metrics
        self.state_queries = state_queries
        self.routes: dict[str, Callable[[Request], Reply]] = {
            "/": self._page,
            "/metrics": self._metrics,
            "/healthz": self._healthz,
            "/readyz": self._readyz,
            "/startupz": self._startupz,
            "/status": self._status,
        }

    def __call__(self, request: Request) -> Reply:
        if request.path.startswith(state_routes.PREFIX):
            return self._state(request)
        route = self.routes.get(request.path)
        if route is None:
            paths = ", ".join(sorted(self.routes))
            return text_reply(404, f"no such page; try one of {paths}\n")
        return route(request)

    def _metrics(self, request: Request) -> Reply:
        return metrics_reply(self.metrics.registry, request.headers.get("Accept", ""))

    def _healthz(self, request: Request) -> Reply:
        healthy, why = self.board.healthy()
        _, progress = self.board.started()
        verdict = "ok" if healthy else "wedged"
        return text_reply(200 if healthy else 503, f"{verdict}: {why}; {progress}\n")

    def _readyz(self, request: Request) -> Reply:
        if self.board.ready:
            return text_reply(200, "ready\n")
        return text_reply(503, f"not ready: {self.board.not_ready_because}\n")

    def _startupz(self, request: Request) -> Reply:
        started, progress = self.board.started()
        return text_reply(
            200 if started else 503, f"{'started' if started else 'starting'}: {progress}\n"
        )

    def _status(self, request: Request) -> Reply:
        return json_reply(200, self.board.snapshot())

    def _state(self, request: Request) -> Reply:
        queries = self.state_queries()
        status, document = state_routes.answer(queries, request.method, request.path, request.query)
        return json_reply(status, document)

    def _page(self, request: Request) -> Reply:
        return Reply(200, _HTML, PAGE.encode())


class HttpServer(RoutedServer):
    """Serves `board` and `metrics` on `host:port` (port 0: any free port) from a daemon thread.

    >>> server = HttpServer(board, metrics, "127.0.0.1", 0)   # doctest: +SKIP
    >>> port = server.start()                                   # doctest: +SKIP
    >>> server.stop()                                           # doctest: +SKIP
    """

    def __init__(
        self,
        board: StatusBoard,
        metrics: Metrics,
        host: str,
        port: int,
        state_queries: StateQueriesSource = _no_state_queries,
    ) -> None:
        routes = _DriverRoutes(board, metrics, state_queries)
        super().__init__(routes, host, port, label="http")

    def start(self) -> int:
        port = super().start()
        _log.info(
            "serving /metrics, /healthz, /readyz, /startupz, /status, /state and / on port %d", port
        )
        return port
