"""The ingest endpoint assembled from settings: `dstreams ingest`, or beside `dstreams run`.

Start-up, in order:

1. resolve the sources that take records (`ingest.sources`; each reads exactly one topic, which
   must exist);
2. check the replication of those topics and of the idempotency keys topic (refused with
   `ReplicationInsufficient` when `kafka.require_replication` demands more);
3. create the keys topic if missing;
4. start the writer thread (it initialises the transactional producer, fencing any older endpoint
   of the app, and loads the remembered keys) and the HTTP server. Requests are answered 503
   until the writer is ready (`/readyz`).

`run_ingest` returns the process's exit code: 0 after SIGTERM/SIGINT, 3 when a newer endpoint of
the same app fenced this one.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any, Protocol

from connectors.codecs import Codec
from connectors.kafka_client import (
    JAVA_PLACEMENT,
    broker_setting,
    new_admin_client,
    new_transactional_producer,
)
from connectors.replication import Replication, TopicUse, enforce
from service.config.runtime import IngestTlsSettings
from service.config.settings import Settings
from service.errors import ConfigError, IngestError
from service.ingest.access import access_for
from service.ingest.asgi import IngestApp
from service.ingest.endpoint import EndpointLimits, IngestRoutes
from service.ingest.job_parsing import source_decoders
from service.ingest.keys import KeyLedger, default_keys_topic, ensure_keys_topic, read_keys
from service.ingest.metrics import IngestMetrics
from service.ingest.parsing import Limits
from service.ingest.server import IngestServer, ServerOptions, TlsFiles
from service.ingest.writer import IngestWriter

log = logging.getLogger(__name__)
EXIT_OK = 0
EXIT_FENCED = 3
# A transaction may stay open this much longer than the acknowledgement wait: room for its
# commit or abort. The broker aborts it after that if this process died holding it.
_TRANSACTION_MARGIN_MS = 30_000


class TopicLister(Protocol):
    """What the endpoint asks of its admin client itself (confluent-kafka's `AdminClient`)."""

    def list_topics(self, *, timeout: float) -> Any: ...


def transactional_id(app_id: str, lane: int = 0) -> str:
    """Every ingest endpoint of `app_id` shares these (one per lane of its writer): a new one
    fences the one before. Lane 0's is the id of the endpoints that had one producer."""
    base = f"dstreams-ingest-{app_id}"
    return base if lane == 0 else f"{base}.{lane}"


def ingest_topics(settings: Settings) -> dict[str, str]:
    """Source name -> the one topic it reads, for every source that takes ingested records."""
    named = list(settings.ingest.sources)
    targets = {}
    for name in named or sorted(settings.sources):
        source = settings.sources.get(name)
        if source is None:
            known = ", ".join(sorted(settings.sources)) or "none"
            msg = f"ingest.sources names {name!r}, which is not under sources (known: {known})"
            raise ConfigError(msg)
        topics = list(source.topics or [])
        if len(topics) == 1:
            targets[name] = topics[0]
        elif named:
            msg = (
                f"ingest.sources names {name!r}, which reads {source.pattern or topics!r}; an "
                "ingest source must read exactly one topic (give it topics: [one])"
            )
            raise ConfigError(msg)
    if not targets:
        msg = "no source can take ingested records: give one a single topic (topics: [name])"
        raise ConfigError(msg)
    return targets


class IngestService:
    """The endpoint: its topics, writer and HTTP server (see the module docstring)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.ingest = settings.ingest
        self.topics = ingest_topics(settings)
        self.keys_topic = self.ingest.keys_topic or default_keys_topic(settings.app_id)
        self.metrics = IngestMetrics(sorted(self.topics))
        self.ledger = KeyLedger(self.ingest.key_retention_ms, self.ingest.max_idempotency_keys)
        self.metrics.watch_keys(lambda: len(self.ledger))
        self.writer: IngestWriter | None = None
        self.server: IngestServer | None = None

    @property
    def fenced(self) -> bool:
        return self.writer is not None and self.writer.fenced

    def start(self) -> int:
        """Check the topics, start the writer and the server; returns the HTTP port."""
        conf = self.settings.kafka.librdkafka_config()
        admin = new_admin_client(conf)
        self._check_topics(admin)
        ensure_keys_topic(
            admin, self.keys_topic, self.ingest.key_retention_ms, self.ingest.replication_factor
        )
        self.writer = IngestWriter(
            _producer_factory(conf, self.settings.app_id, self.ingest),
            lambda start: read_keys(conf, self.keys_topic, self.ledger, start),
            self.keys_topic,
            self.ledger,
            self.ingest.ack_timeout_ms / 1000,
            on_ready=self.metrics.set_ready,
            on_committed=self.metrics.transaction_committed,
            key_header=self.ingest.key_header,
        )
        self.writer.start()
        auth = self.ingest.auth
        routes = IngestRoutes(
            self.writer,
            self.topics,
            self._limits(),
            self.metrics,
            self._decoders(),
            access_for(auth.tokens_dir, auth.clients),
        )
        self.server = IngestServer(
            IngestApp(routes, self.ingest.body_timeout_ms / 1000), self._server_options()
        )
        port = self.server.start()
        sources = ", ".join(f"{s} -> {t}" for s, t in sorted(self.topics.items()))
        log.info("ingest endpoint on port %d: POST /ingest/<source> (%s)", port, sources)
        return port

    def stop(self) -> None:
        """No new requests; those queued are written (or answered 503), then the server stops."""
        if self.writer is not None:
            self.writer.stop()
        if self.server is not None:
            self.server.stop()

    def _decoders(self) -> dict[str, Codec]:
        """Each source's decoder as the job reads with it: records are checked with it at the
        door (`service.ingest.job_parsing`)."""
        return source_decoders(self.settings, sorted(self.topics))

    def _server_options(self) -> ServerOptions:
        ingest = self.ingest
        return ServerOptions(
            host=ingest.host,
            port=ingest.port,
            header_timeout_s=ingest.header_timeout_ms / 1000,
            body_timeout_s=ingest.body_timeout_ms / 1000,
            keep_alive_s=ingest.keep_alive_ms / 1000,
            max_connections=ingest.max_connections,
            tls=_tls_files(ingest.tls),
        )

    def _limits(self) -> EndpointLimits:
        ingest = self.ingest
        ack_s = ingest.ack_timeout_ms / 1000
        return EndpointLimits(
            max_request_bytes=ingest.max_request_bytes,
            records=Limits(ingest.max_records_per_request, ingest.max_record_bytes),
            max_in_flight=ingest.max_in_flight_requests,
            # Waiting in the queue, the transaction, and an abort after a failed one.
            wait_s=2 * ack_s + 5,
        )

    def _check_topics(self, admin: TopicLister) -> None:
        existing = admin.list_topics(timeout=30).topics
        missing = sorted(f"{t} (source {s})" for s, t in self.topics.items() if t not in existing)
        if missing:
            msg = (
                f"ingest topics do not exist: {', '.join(missing)}; expected each source's topic "
                "to exist (dstreams does not create input topics). Create them first."
            )
            raise IngestError(msg)
        kafka = self.settings.kafka
        enforce(
            admin,
            self._topic_uses,
            Replication(kafka.min_replication_factor, kafka.min_insync_replicas),
            required=kafka.require_replication,
            bootstrap=kafka.bootstrap_servers,
            report=self.metrics.set_topic_under_replicated,
        )

    def _topic_uses(self, admin: TopicLister) -> list[TopicUse]:
        uses = [TopicUse(t, "input", f"ingest source {s}") for s, t in sorted(self.topics.items())]
        factor = self.ingest.replication_factor
        if factor is None and self.keys_topic not in admin.list_topics(timeout=30).topics:
            factor = broker_setting(admin, "default.replication.factor")
        uses.append(
            TopicUse(
                self.keys_topic,
                "ingest-keys",
                "the ingest endpoint",
                creates_with=factor,
                setting="ingest",
            )
        )
        return uses


def _producer_factory(conf: dict[str, str], app_id: str, ingest: Any) -> Callable[[int], Any]:
    settings = {
        "linger.ms": ingest.linger_ms,
        "message.timeout.ms": ingest.ack_timeout_ms,
        "message.max.bytes": max(1_000_000, ingest.max_record_bytes + (64 << 10)),
        "retry.backoff.ms": 10,
    }
    return lambda lane: new_transactional_producer(
        conf,
        transactional_id(app_id, lane),
        ingest.ack_timeout_ms + _TRANSACTION_MARGIN_MS,
        defaults=JAVA_PLACEMENT,
        settings=settings,
    )


def _tls_files(tls: IngestTlsSettings) -> TlsFiles | None:
    if tls.cert_file is None or tls.key_file is None:
        return None
    return TlsFiles(tls.cert_file, tls.key_file, tls.client_ca_file)


# --- processes --------------------------------------------------------------------------------


def run_ingest(settings: Settings) -> int:
    """`dstreams ingest`: serve until SIGTERM/SIGINT (0) or until fenced (3)."""
    from service.observe import logs

    logs.configure_logging(settings.logging.format, settings.logging.level, settings.app_id)
    stop = threading.Event()

    def request_stop(signum: int, _frame: FrameType | None) -> None:
        log.info("signal %d received: finishing the requests in flight, then stopping", signum)
        stop.set()

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)
    service = IngestService(settings)
    try:
        service.start()
        while not stop.wait(0.5):
            if service.fenced:
                log.critical(
                    "a newer ingest endpoint of app %s took over; stopping", settings.app_id
                )
                return EXIT_FENCED
        return EXIT_OK
    finally:
        started = time.monotonic()
        service.stop()
        log.info("ingest endpoint stopped (%.1fs)", time.monotonic() - started)


@contextmanager
def ingest_alongside(settings: Settings) -> Iterator[IngestService | None]:
    """The endpoint in this process while the block runs, when `ingest.enabled` asks for it.

    Fenced by a newer endpoint of the app (another driver's, e.g. a warm standby's), it steps
    down as a driver does: it stops serving, so the balancer sends clients to the newer one,
    while the driver itself runs on.
    """
    if not settings.ingest.enabled:
        yield None
        return
    service = IngestService(settings)
    stepped_down = threading.Event()
    try:
        service.start()
        threading.Thread(
            target=_step_down_when_fenced,
            args=(service, stepped_down),
            name="dstreams-ingest-fencing",
            daemon=True,
        ).start()
        yield service
    finally:
        stepped_down.set()
        service.stop()


def _step_down_when_fenced(service: IngestService, done: threading.Event) -> None:
    while not done.wait(0.5):
        if service.fenced:
            log.critical(
                "a newer ingest endpoint of app %s took over; this one stops serving (the "
                "driver runs on)",
                service.settings.app_id,
            )
            service.stop()
            return
