"""Who may write to which source: bearer tokens read from files, each allowed a set of sources.

`ingest.auth.tokens_dir` holds one file per client, as a Kubernetes Secret mounts its keys: the
file's name is the client's name, its content (stripped) the token. `ingest.auth.clients` names
the sources each client may write to (``*``: all). The directory is read again when it changes
(Kubernetes swaps a Secret's files with one rename of ``..data``), looked at no more often than
every `RECHECK_S`.

Answers never say which sources exist: without a known token it is 401 whatever the path; with
one, a source the client may not write to is 403 whether or not the source exists.
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from service.errors import ConfigError

log = logging.getLogger(__name__)
ANY_SOURCE = "*"
# How stale a rotated token may be, in seconds; also bounds the stat calls to one per period.
RECHECK_S = 5.0
Decision = Literal["allowed", "unauthenticated", "forbidden"]


@dataclass(frozen=True)
class Client:
    name: str
    sources: frozenset[str]

    def may_write(self, source: str) -> bool:
        return ANY_SOURCE in self.sources or source in self.sources


class OpenAccess:
    """No authentication: every request may write to every ingest source."""

    def decide(self, authorization: str | None, source: str) -> Decision:
        return "allowed"


class TokenAccess:
    """Bearer tokens from `tokens_dir`, each allowed the sources `clients` gives its file name."""

    def __init__(self, tokens_dir: str, clients: Mapping[str, list[str]]) -> None:
        self.tokens_dir = Path(tokens_dir)
        self.clients = {name: frozenset(sources) for name, sources in clients.items()}
        self._lock = threading.Lock()
        self._by_digest: dict[bytes, Client] = {}
        self._stamp: tuple[float, ...] = ()
        self._checked = 0.0
        self._load(strict=True)

    def decide(self, authorization: str | None, source: str) -> Decision:
        token = _bearer_token(authorization)
        if token is None:
            return "unauthenticated"
        self._reload_if_changed()
        # Looked up by digest: equal-length keys, no comparison that stops at the first byte.
        client = self._by_digest.get(_digest(token))
        if client is None:
            return "unauthenticated"
        return "allowed" if client.may_write(source) else "forbidden"

    def _reload_if_changed(self) -> None:
        now = time.monotonic()
        if now - self._checked < RECHECK_S:
            return
        with self._lock:
            self._checked = now
            if self._directory_stamp() != self._stamp:
                try:
                    self._load(strict=False)
                except (OSError, ConfigError) as error:  # keep the tokens in force
                    log.error("ingest tokens not reloaded, the previous ones stay: %s", error)

    def _load(self, *, strict: bool) -> None:
        stamp = self._directory_stamp()
        by_digest: dict[bytes, Client] = {}
        for path in _token_files(self.tokens_dir):
            token = path.read_text(encoding="utf-8").strip()
            sources = self.clients.get(path.name)
            if sources is None or not token:
                why = "has no entry in ingest.auth.clients" if token else "is empty"
                msg = f"ingest token file {path.name!r} in {self.tokens_dir} {why}"
                if strict:
                    raise ConfigError(msg)
                log.warning("%s; ignored", msg)
                continue
            by_digest[_digest(token)] = Client(path.name, sources)
        self._by_digest, self._stamp = by_digest, stamp
        log.info("ingest access: %d client tokens loaded", len(by_digest))

    def _directory_stamp(self) -> tuple[float, ...]:
        try:
            files = _token_files(self.tokens_dir)
            return (self.tokens_dir.stat().st_mtime, *(p.stat().st_mtime for p in files))
        except OSError:
            return ()


def access_for(
    tokens_dir: str | None, clients: Mapping[str, list[str]]
) -> OpenAccess | TokenAccess:
    if tokens_dir is None:
        return OpenAccess()
    if not os.path.isdir(tokens_dir):
        msg = f"ingest.auth.tokens_dir {tokens_dir!r} is not a directory (one file per client)"
        raise ConfigError(msg)
    return TokenAccess(tokens_dir, clients)


def _token_files(directory: Path) -> list[Path]:
    """The token files, without Kubernetes' own entries (`..data` and its timestamped dirs)."""
    return sorted(p for p in directory.iterdir() if not p.name.startswith(".") and p.is_file())


def _bearer_token(authorization: str | None) -> str | None:
    if authorization is None:
        return None
    scheme, _, token = authorization.strip().partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip()


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8", "surrogateescape")).digest()
