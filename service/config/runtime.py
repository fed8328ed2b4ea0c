"""How the service runs around the job: Spark, checkpoints, the HTTP server, warm standby,
logging, backpressure and the ingest endpoint.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from pydantic import Field, SecretStr, field_validator, model_validator

from service.config.masters import SparkMaster, parse_master
from service.config.model import ConfigModel
from service.config.storage import S3Settings, on_object_storage
from service.config.types import (
    ConfValue,
    DurationMs,
    LogLevel,
    Name,
    TopicName,
    raise_all,
    sensitive_keys,
)

if TYPE_CHECKING:
    from service.graph.checkpoint_store import CheckpointStore


class SparkSettings(ConfigModel):
    master: str = "local[2]"
    """Spark master URL: local[N], spark://host:port, k8s://https://host:port, yarn."""
    driver_host: str | None = None
    """Address executors reach the driver at (a cluster only; local mode keeps loopback).
    Default: this host's address on its route to the master. In a pod, set it from the pod's IP
    with DSTREAMS_SPARK__DRIVER_HOST."""
    bind_address: str | None = None
    """Address the driver listens on (a cluster only); default driver_host. 0.0.0.0: all."""
    ship_job: Literal["auto", "always", "never"] = "auto"
    """Ship the job's top-level module or package to the executors as a zip: auto does it on a
    cluster unless the job is installed (in site-packages, as in an image executors share)."""
    start_timeout_s: float = Field(default=180.0, gt=0)
    """How long start-up waits for a cluster's executors to run a first task (which also checks
    that they can import the job) before giving up with a message."""
    stable_placement: bool = True
    """On a cluster, run output partition p on the same executor batch after batch, so a Kafka
    sink's transactional producer is not initialized again (and fenced) on another one."""
    class_archive: str = "auto"
    """The driver JVM's class-data sharing archive, which takes about a second off Spark's
    start: auto uses the one `dstreams dev class-archive` builds for this JVM and pyspark (in
    $DSTREAMS_CLASS_ARCHIVE_DIR, else ~/.cache/dstreams) if it is there; off; or a path."""
    conf: dict[str, ConfValue] = Field(default_factory=dict)
    """Extra Spark properties (spark.executor.memory: 2g, ...)."""
    secret_conf: dict[str, SecretStr] = Field(default_factory=dict)
    """Spark properties holding credentials; masked when shown."""

    @field_validator("master")
    @classmethod
    def _known_master(cls, master: str) -> str:
        parse_master(master)
        return master.strip()

    @field_validator("conf")
    @classmethod
    def _no_secrets_in_conf(cls, conf: dict[str, str]) -> dict[str, str]:
        raise_all(sensitive_keys(conf, "spark.secret_conf"))
        return conf

    @property
    def parsed_master(self) -> SparkMaster:
        return parse_master(self.master)

    def spark_conf(self) -> dict[str, str]:
        """Every extra Spark property, secrets revealed: for the SparkConf only."""
        revealed = {key: value.get_secret_value() for key, value in self.secret_conf.items()}
        return {**self.conf, **revealed}


class CheckpointSettings(ConfigModel):
    path: str = Field(default="state/checkpoints", min_length=1)
    """Where state checkpoints go: a path every executor sees (local, or a mounted volume), or
    S3-compatible object storage, s3://BUCKET/PREFIX (s3a:// alike), reached as `s3` says."""
    interval_batches: int | None = Field(default=None, ge=1)
    """Checkpoint state (stateful jobs only) every this many batches; default: about 10 s."""
    local_state_dir: str = Field(default="state/local", min_length=1)
    """Where the executors keep the stores of states on disk (`update_state_on_disk`): a
    local folder of each executor's machine (relative: to the driver's working directory).
    What is there is rebuilt from the checkpoints when lost; give it fast disk."""
    s3: S3Settings = Field(default_factory=S3Settings)
    """Object storage: endpoint, region, addressing and credentials (path s3:// only)."""

    def store(self) -> CheckpointStore:
        """The checkpoint store at `path`: on object storage for an s3:// or s3a:// URI."""
        from service.graph.checkpoint_store import CheckpointStore

        if not on_object_storage(self.path):
            return CheckpointStore(self.path)
        # Here only: boto3 loads where a store on object storage is built.
        from service.graph.checkpoint_s3 import S3Endpoint, S3Files

        s3 = self.s3
        credentials = str(s3.credentials_file) if s3.credentials_file is not None else None
        endpoint = S3Endpoint(s3.endpoint_url, s3.region, s3.path_style, credentials)
        return CheckpointStore(S3Files.at(self.path, endpoint))


class HttpSettings(ConfigModel):
    # All interfaces: in a pod, Prometheus and the kubelet's probes connect from outside.
    host: str = "0.0.0.0"  # noqa: S104
    port: int = Field(default=8080, ge=0, le=65535)
    """0 picks a free port (tests)."""
    unhealthy_after_s: float | None = Field(default=None, gt=0)
    """`/healthz` fails once no batch has started or finished for this long (a stuck batch, a
    stalled cluster). Default: 30 s or ten batch intervals, whichever is longer."""
    state_query_timeout_s: float = Field(default=10.0, gt=0)
    """A live state query (`/state/<name>/<key>`, of a keyed state the job made queryable) whose
    Spark jobs take longer than this is cancelled and answered 503."""


class StandbySettings(ConfigModel):
    """Warm standby (docs/architecture.md, Recovery): drivers wait, warm, for the journal's
    leadership before taking an epoch."""

    enabled: bool = False
    """Start Spark and the job, then wait until elected before taking the journal's next epoch.
    Every driver of the app must run with the same value (`dstreams run --standby`)."""
    session_timeout_ms: DurationMs = Field(default=6_000, ge=1)
    """Kafka journal: how long the brokers wait for a silent driver before electing another
    (librdkafka's session.timeout.ms). Brokers refuse values below their
    group.min.session.timeout.ms (6 s by default); lower it there for a faster take-over."""


class LoggingSettings(ConfigModel):
    format: Literal["json", "text", "auto"] = "auto"
    """auto: text when stderr is a terminal, else JSON lines."""
    level: LogLevel = "INFO"


class BackpressureSettings(ConfigModel):
    enabled: bool = False
    """Adapt per-partition rates so scheduling delay stops growing (Spark's PID estimator)."""
    initial_rate: float | None = Field(default=None, gt=0)
    """Records/s per partition for the first batches, before any measurement."""
    min_rate: float = Field(default=100.0, gt=0)
    """The estimator never goes below this many records/s per partition."""
    proportional: float = Field(default=1.0, ge=0)
    integral: float = Field(default=0.2, ge=0)
    derived: float = Field(default=0.0, ge=0)


class IngestTlsSettings(ConfigModel):
    """TLS of the ingest endpoint (PEM files; a Kubernetes TLS Secret mounts tls.crt and
    tls.key)."""

    cert_file: str | None = None
    """The server's certificate chain; set with key_file to serve HTTPS only."""
    key_file: str | None = None
    client_ca_file: str | None = None
    """Set: clients must present a certificate signed by one of these CAs (mutual TLS)."""

    @property
    def enabled(self) -> bool:
        return self.cert_file is not None

    @model_validator(mode="after")
    def _files_together(self) -> IngestTlsSettings:
        if (self.cert_file is None) != (self.key_file is None):
            msg = "ingest.tls needs both cert_file and key_file (or neither, for plain HTTP)"
            raise ValueError(msg)
        if self.client_ca_file is not None and self.cert_file is None:
            msg = "ingest.tls.client_ca_file needs cert_file and key_file (mutual TLS is TLS)"
            raise ValueError(msg)
        return self


class IngestAuthSettings(ConfigModel):
    """Bearer tokens of the ingest endpoint's clients, each allowed some sources."""

    tokens_dir: str | None = None
    """A directory with one file per client (as a Kubernetes Secret mounts its keys): the file's
    name is the client's name, its content the client's token. Re-read when it changes, so a
    rotated Secret takes effect without a restart. None: no authentication (loopback use)."""
    clients: dict[str, list[str]] = Field(default_factory=dict)
    """Client name -> the sources it may write to ("*": every ingest source). A token file of
    a client not named here is refused at start-up."""


class IngestSettings(ConfigModel):
    """The HTTP ingest endpoint (`dstreams ingest`): records in, acknowledged once replicated."""

    enabled: bool = False
    """Also serve the endpoint inside `dstreams run` (`dstreams ingest` always serves it)."""
    host: str = "127.0.0.1"
    """Address to listen on; loopback by default. In a pod, where clients connect from outside,
    0.0.0.0 (the chart sets it), with TLS and tokens configured."""
    port: int = Field(default=8081, ge=0, le=65535)
    """0 picks a free port (tests)."""
    header_timeout_ms: DurationMs = 10_000
    """A request's head (request line and headers) must arrive within this of the connection
    opening or of the previous answer on it; else the connection is closed."""
    body_timeout_ms: DurationMs = 30_000
    """A request's whole body must arrive within this of its head (408 after it): a client
    trickling bytes cannot hold a connection longer."""
    keep_alive_ms: DurationMs = 75_000
    """A kept-alive connection idle this long between requests is closed. Longer than a load
    balancer's idle timeout (60 s on common ones), so the balancer, not the endpoint, closes an
    idle connection and never sends a request on one being closed."""
    max_connections: int = Field(default=4096, ge=1)
    """Open connections (idle ones included) beyond which a request is answered 503 and its
    connection closed. Each costs a socket (a file descriptor), not a thread."""
    sources: list[Name] = Field(default_factory=list)
    """Sources that accept records at POST /ingest/<source>; each must read exactly one topic.
    Empty: every source that reads exactly one topic."""
    keys_topic: TopicName | None = None
    """Compacted topic of recent idempotency keys; none means dstreams.ingest-keys.<app_id>."""
    key_retention_ms: DurationMs = 86_400_000
    """How long an idempotency key is remembered after its request was acknowledged; a retry
    later than this is written again."""
    max_idempotency_keys: int = Field(default=500_000, ge=1)
    """Most idempotency keys remembered at once (about 400 bytes of memory each). Past it a
    request with a new key is answered 429 with Retry-After until the oldest key expires; no key
    is forgotten before key_retention_ms."""
    replication_factor: int | None = Field(default=None, ge=1)
    """Replication factor of the keys topic if dstreams creates it; none: the brokers' default."""
    ack_timeout_ms: DurationMs = 15_000
    """Longest wait for the in-sync replicas to acknowledge a request before it is answered 503."""
    max_request_bytes: int = Field(default=4 << 20, ge=1)
    """Larger request bodies are refused with 413."""
    max_records_per_request: int = Field(default=10_000, ge=1)
    max_record_bytes: int = Field(default=1_000_000, ge=1)
    """Largest key plus value of one record; keep it under the topics' max.message.bytes."""
    max_in_flight_requests: int = Field(default=32, ge=1)
    """Requests read or awaiting acknowledgement at once; more are answered 503 at once, so
    memory stays under about this many times max_request_bytes."""
    linger_ms: int = Field(default=5, ge=0)
    """librdkafka's linger.ms for the ingest producer."""
    key_header: bool = False
    """Give every record the header dstreams.idempotency-key (its request's key), to trace a
    record to its request. Off by default: nothing in dstreams reads it, and it adds the key and
    about 30 bytes to each record (on ~100-byte records, a third more bytes on the brokers)."""
    tls: IngestTlsSettings = Field(default_factory=IngestTlsSettings)
    auth: IngestAuthSettings = Field(default_factory=IngestAuthSettings)
