"""The ingest endpoint as an ASGI application: HTTP framing, body limits and deadlines.

uvicorn (with h11) parses requests; this adds what a client-facing endpoint needs on top of it
(docs/architecture.md, "Ingest"):

- a request with both Content-Length and Transfer-Encoding is refused (400, connection closed):
  h11 frames it by Transfer-Encoding, a proxy in front may frame it by Content-Length, and the
  difference smuggles requests;
- the routes judge the headers first (`IngestRoutes.admit`), so an unknown source, a wrong token
  or a Content-Length over the limit is answered before the client sends its body (uvicorn
  sends ``100 Continue`` only once the body is read);
- the body, chunked or not, is read within `body_timeout_s` in total (408 after it) and refused
  at the first byte over the limit (413); both close the connection;
- no answer carries a traceback, a path or a Kafka client's error text: an unexpected error is
  logged and answered 500 with a fixed text.

h11 itself answers 400 (and closes) a malformed request line or header, a non-numeric or
non-ASCII Content-Length, conflicting Content-Lengths and headers over uvicorn's size limit.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any
from urllib.parse import parse_qs

from service.ingest.endpoint import PREFIX, Admitted, Call, IngestRoutes
from service.observe.http import Reply, json_reply

log = logging.getLogger(__name__)

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
# A refused body up to this many times the limit is left to uvicorn to read and drop, so a client
# that sends it all before reading the answer (most do) sees the 413; beyond it the connection
# is closed instead (the client may only see it broken).
DRAIN_FACTOR = 4


class ClientGone(Exception):
    """The client closed the connection before its body was complete."""


class IngestApp:
    """ASGI 3 application serving `routes`; see the module docstring."""

    def __init__(self, routes: IngestRoutes, body_timeout_s: float) -> None:
        self.routes = routes
        self.body_timeout_s = body_timeout_s

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        try:
            reply, close = await self._reply(_call_of(scope), receive)
        except ClientGone:
            return
        except Exception:
            log.exception("ingest request %s %s failed", scope.get("method"), scope.get("path"))
            reply, close = json_reply(500, {"error": "internal error; see the service log"}), True
        await _send(send, reply, close)

    async def _reply(self, call: Call, receive: Receive) -> tuple[Reply, bool]:
        """The reply, and whether the connection must close after it."""
        length_header = call.headers.get("content-length")
        chunked = "transfer-encoding" in call.headers
        if length_header is not None and chunked:
            message = "Content-Length and Transfer-Encoding together are refused"
            return json_reply(400, {"error": message}), True
        if not call.path.startswith(PREFIX):
            return self.routes.page(call), False
        length = None if length_header is None else int(length_header)  # h11 checked digits
        admitted = self.routes.admit(call, length, chunked)
        if not isinstance(admitted, Admitted):
            unread = length is not None and length > 0 or chunked
            big = chunked or (length or 0) > DRAIN_FACTOR * self.routes.limits.max_request_bytes
            return admitted, unread and big
        body = await self._body(admitted, receive)
        if isinstance(body, Reply):
            return body, True
        return await self.routes.ingest(admitted, call, body), False

    async def _body(self, admitted: Admitted, receive: Receive) -> bytes | Reply:
        limit = self.routes.limits.max_request_bytes
        try:
            async with asyncio.timeout(self.body_timeout_s):
                return await _read_body(receive, limit)
        except TimeoutError:
            message = f"the body did not arrive within {self.body_timeout_s:g} s"
            return self.routes.refuse(admitted, 408, message)
        except _TooLarge as large:
            return self.routes.refuse(admitted, 413, self.routes.too_large(large.size))


class _TooLarge(Exception):
    def __init__(self, size: int) -> None:
        super().__init__(size)
        self.size = size


async def _read_body(receive: Receive, limit: int) -> bytes:
    pieces: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientGone
        piece = message.get("body", b"")
        size += len(piece)
        if size > limit:
            raise _TooLarge(size)
        pieces.append(piece)
        if not message.get("more_body", False):
            return b"".join(pieces)


def _call_of(scope: Scope) -> Call:
    headers: dict[str, str] = {}
    for name, value in scope["headers"]:
        key, text = name.decode("latin-1").lower(), value.decode("latin-1")
        headers[key] = f"{headers[key]}, {text}" if key in headers else text
    query = scope.get("query_string", b"").decode("latin-1")
    first = {key: values[0] for key, values in parse_qs(query).items()}
    return Call(scope["method"], scope["path"], first, headers)


async def _send(send: Send, reply: Reply, close: bool) -> None:
    # Names as the clients' libraries print them (h11 sends them as given).
    headers = [
        (b"Content-Type", reply.content_type.encode()),
        (b"Content-Length", str(len(reply.body)).encode()),
        (b"Cache-Control", b"no-store"),
        (b"X-Content-Type-Options", b"nosniff"),
        *((name.encode("latin-1"), value.encode("latin-1")) for name, value in reply.headers),
    ]
    if close:
        headers.append((b"Connection", b"close"))
    await send({"type": "http.response.start", "status": reply.status, "headers": headers})
    await send({"type": "http.response.body", "body": reply.body})
