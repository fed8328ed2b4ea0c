"""A client of the ingest endpoint for tests, benchmarks and scripts: one keep-alive connection,
and a send loop that retries every answer but 200 until it gets one.

    client = IngestClient("127.0.0.1", 8081)
    reply = client.post("lines", b'{"id": 1}\\n', key="batch-1")
    client.send_until_acknowledged("lines", body, key="batch-2")

With an Idempotency-Key, retrying until 200 writes each record exactly once whatever fails in
between (see the README's "Ingest" section); that is what `send_until_acknowledged` relies on.
"""

from __future__ import annotations

import http.client
import json
import time
from collections.abc import Callable
from dataclasses import dataclass

NDJSON = "application/x-ndjson"


@dataclass(frozen=True)
class IngestReply:
    status: int
    body: dict[str, object]
    retry_after_s: float | None
    sent_at: float
    """time.monotonic() when the request was sent."""
    answered_at: float


class IngestClient:
    """Posts to one endpoint over a kept-alive connection (reconnecting when it breaks)."""

    def __init__(self, host: str, port: int, timeout_s: float = 60.0) -> None:
        self.host, self.port, self.timeout_s = host, port, timeout_s
        self._connection: http.client.HTTPConnection | None = None

    def post(
        self,
        source: str,
        body: bytes,
        *,
        key: str | None = None,
        content_type: str = NDJSON,
        query: str = "",
    ) -> IngestReply:
        """One request; raises `OSError` (or `http.client.HTTPException`) if the connection
        fails, after closing it so the next request reconnects."""
        headers = {"Content-Type": content_type}
        if key is not None:
            headers["Idempotency-Key"] = key
        sent = time.monotonic()
        connection = self._connect()
        try:
            connection.request("POST", f"/ingest/{source}{query}", body, headers)
            response = connection.getresponse()
            payload = response.read()
        except (OSError, http.client.HTTPException):
            self.close()
            raise
        if response.getheader("Connection", "").lower() == "close":
            self.close()
        retry_after = response.getheader("Retry-After")
        document = json.loads(payload) if payload else {}
        return IngestReply(
            response.status,
            document,
            float(retry_after) if retry_after else None,
            sent,
            time.monotonic(),
        )

    def send_until_acknowledged(
        self,
        source: str,
        body: bytes,
        key: str,
        *,
        max_pause_s: float = 1.0,
        deadline_s: float = 600.0,
        on_reply: Callable[[IngestReply | None], None] = lambda reply: None,
    ) -> IngestReply:
        """Post until the answer is 200; `on_reply` sees every answer (None: no connection)."""
        give_up = time.monotonic() + deadline_s
        while True:
            try:
                reply: IngestReply | None = self.post(source, body, key=key)
            except (OSError, http.client.HTTPException):
                reply = None
            on_reply(reply)
            if reply is not None and reply.status == 200:
                return reply
            if time.monotonic() > give_up:
                msg = f"no 200 for idempotency key {key!r} within {deadline_s:.0f}s: {reply}"
                raise TimeoutError(msg)
            wait = reply.retry_after_s if reply and reply.retry_after_s is not None else 0.2
            time.sleep(min(wait, max_pause_s))

    def close(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None

    def _connect(self) -> http.client.HTTPConnection:
        if self._connection is None:
            self._connection = http.client.HTTPConnection(
                self.host, self.port, timeout=self.timeout_s
            )
        return self._connection
