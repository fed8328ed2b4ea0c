"""The ingest endpoint's HTTP server: uvicorn with h11, in a thread of its own.

What uvicorn gives by itself and what is added here (docs/architecture.md, "Ingest"):

- connections: uvicorn's `limit_concurrency` answers 503 (and closes) a request arriving while
  `max_connections` connections are open; an idle connection costs a socket, never a thread;
- keep-alive: a connection idle for `keep_alive_s` between requests is closed (uvicorn);
- headers: h11 refuses a head over `max_header_bytes` (400); **added**: the whole head must
  arrive within `header_timeout_s` of the connection opening or of the previous answer, else
  the connection is closed (uvicorn has only the idle timer, which the first byte stops);
- the body's total deadline, framing and size limits are `service.ingest.asgi`'s;
- TLS (and client certificates) by uvicorn's SSL context, the handshake bounded by asyncio's
  default of 60 s;
- **added**: every connection has ``TCP_NODELAY``, so an answer is never held back (below).

Its log lines go through the service's logging (no uvicorn log configuration, no access log).
"""

from __future__ import annotations

import asyncio
import logging
import socket
import ssl
import threading
from dataclasses import dataclass
from typing import Any

import h11
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

from service.ingest.asgi import IngestApp

log = logging.getLogger(__name__)
# How long stop() waits for requests in flight before their connections are cut.
_GRACEFUL_STOP_S = 5


@dataclass(frozen=True)
class TlsFiles:
    """PEM files of the server's TLS; `client_ca` set: clients must show a certificate it signed."""

    cert: str
    key: str
    client_ca: str | None = None


@dataclass(frozen=True)
class ServerOptions:
    host: str
    port: int
    """0 picks a free port."""
    header_timeout_s: float = 10.0
    body_timeout_s: float = 30.0
    keep_alive_s: float = 75.0
    max_connections: int = 4096
    max_header_bytes: int = 16 << 10
    tls: TlsFiles | None = None


class _HeadDeadlineProtocol(H11Protocol):
    """uvicorn's h11 protocol with a total deadline on each request's head (see the module
    docstring), on connections without Nagle's delay. `head_timeout_s` is set by a subclass per
    server (uvicorn makes the protocol)."""

    head_timeout_s = 10.0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._head_deadline: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        _send_without_delay(transport)
        self._arm_head_deadline()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self.conn.their_state is not h11.IDLE:
            self._disarm_head_deadline()  # the head is complete (or refused)
        elif self._head_deadline is None:
            self._arm_head_deadline()  # the next request on a kept-alive connection began

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm_head_deadline()
        super().connection_lost(exc)

    def _arm_head_deadline(self) -> None:
        self._head_deadline = self.loop.call_later(self.head_timeout_s, self._head_too_slow)

    def _disarm_head_deadline(self) -> None:
        if self._head_deadline is not None:
            self._head_deadline.cancel()
            self._head_deadline = None

    def _head_too_slow(self) -> None:
        self._head_deadline = None
        if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
            self.transport.close()


def _send_without_delay(transport: asyncio.BaseTransport) -> None:
    """TCP_NODELAY on the connection. An answer goes out in two writes (head, then body); with
    Nagle's algorithm the body waits for the client to acknowledge the head, which a client
    reading the answer delays by its delayed-ACK timer: 40 ms on Linux added to every request
    (measured: p50 43 ms between the answer's last write and the client having it). asyncio
    sets the option itself only on sockets made with proto IPPROTO_TCP, which ours is not."""
    sock = transport.get_extra_info("socket")
    if sock is not None:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


class IngestServer:
    """Serves an `IngestApp` with uvicorn from a daemon thread; `start` returns the port."""

    def __init__(self, app: IngestApp, options: ServerOptions) -> None:
        self.app = app
        self.options = options
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self._socket: socket.socket | None = None

    def start(self) -> int:
        options = self.options
        protocol = type(
            "IngestHttpProtocol",
            (_HeadDeadlineProtocol,),
            {"head_timeout_s": options.header_timeout_s},
        )
        config = uvicorn.Config(
            self.app,
            http=protocol,
            lifespan="off",
            log_config=None,
            access_log=False,
            server_header=False,
            limit_concurrency=options.max_connections,
            timeout_keep_alive=max(1, round(options.keep_alive_s)),
            timeout_graceful_shutdown=_GRACEFUL_STOP_S,
            h11_max_incomplete_event_size=options.max_header_bytes,
            **_tls_settings(options.tls),
        )
        config.load()  # here, so that unreadable TLS files fail start() with their error
        server = uvicorn.Server(config)
        sock = _bound_socket(options.host, options.port)
        thread = threading.Thread(
            target=server.run, kwargs={"sockets": [sock]}, name="dstreams-ingest-http", daemon=True
        )
        thread.start()
        self._server, self._thread, self._socket = server, thread, sock
        self._wait_started(server, thread)
        return int(sock.getsockname()[1])

    @property
    def port(self) -> int:
        if self._socket is None:
            msg = f"{type(self).__name__} is not started"
            raise RuntimeError(msg)
        return int(self._socket.getsockname()[1])

    def stop(self) -> None:
        """Answer what is in flight (up to a few seconds), close every connection, free the port."""
        server, thread = self._server, self._thread
        self._server = self._thread = None
        if server is None:
            return
        server.should_exit = True
        if thread is not None:
            thread.join(_GRACEFUL_STOP_S + 5)
        if self._socket is not None:
            self._socket.close()

    @staticmethod
    def _wait_started(server: uvicorn.Server, thread: threading.Thread) -> None:
        while not server.started:
            if not thread.is_alive():
                msg = "the ingest HTTP server stopped while starting; see the log above"
                raise RuntimeError(msg)
            thread.join(0.01)


def _bound_socket(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(2048)
    sock.setblocking(False)
    return sock


def _tls_settings(tls: TlsFiles | None) -> dict[str, Any]:
    if tls is None:
        return {}
    return {
        "ssl_certfile": tls.cert,
        "ssl_keyfile": tls.key,
        "ssl_ca_certs": tls.client_ca,
        "ssl_cert_reqs": ssl.CERT_REQUIRED if tls.client_ca else ssl.CERT_NONE,
    }
