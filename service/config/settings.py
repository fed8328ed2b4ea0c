"""The service's configuration: frozen models, loaded from YAML with environment overrides on top.

Layers, lowest first: the models' defaults, `config/defaults.yaml` (when the tree ships it), the
user's file, then `DSTREAMS_A__B` variables (`DSTREAMS_HTTP__PORT=9000` sets `http.port`). Maps
merge key by key; anything else is replaced. The merged result is validated once, so every problem
is reported together, one line each (see `service.config.problems`).

Secrets are `SecretStr`: masked in `repr`, in `masked_dict()` and in error messages, and revealed
only by `KafkaSettings.librdkafka_config()`, `SparkSettings.spark_conf()` and the sink that needs
them.

Each kind of sink and journal is one model of a discriminated union (on `type`), and each model
builds its object with `build(...)`, typed by what it needs: an unknown kind cannot get past
validation, and no other code decides which class a kind means.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PrivateAttr,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from connectors.planner import StartingOffsets, partition_bounds_problem
from service.config.loading import deep_merge, read_env, read_yaml
from service.config.masters import SparkMaster, parse_master
from service.config.paths import shipped_config_file
from service.config.problems import InvalidConfig, problems_of
from service.config.storage import shared_path_problem
from service.config.types import (
    MANAGED_KAFKA_KEYS,
    ConfValue,
    DurationMs,
    LogLevel,
    Name,
    SqlName,
    SqlNames,
    StartingOffsetsSetting,
    TopicList,
    TopicName,
    check_job,
    parse_starting_offsets,
    raise_all,
    sensitive_keys,
    starting_offsets_for_planner,
)
from service.errors import ConfigError

if TYPE_CHECKING:
    from connectors.avro import AvroDecoder, AvroOutput
    from connectors.codecs import Codec

    # Built objects only: importing them at run time would load Kafka and PostgreSQL clients
    # into every process that merely reads its configuration.
    from service.journal.file import FileJournal
    from service.journal.kafka import KafkaJournal
    from sinks.console import ConsoleSink
    from sinks.dead_letters import DeadLetterSink
    from sinks.files import FileSink
    from sinks.kafka import KafkaSink
    from sinks.postgres import PostgresSink

__all__ = [
    "DEFAULTS_FILE",
    "BackpressureSettings",
    "CheckpointSettings",
    "ConsoleSinkSettings",
    "DeadLetterSettings",
    "FileJournalSettings",
    "FilesSinkSettings",
    "HttpSettings",
    "IngestSettings",
    "InvalidConfig",
    "JournalSettings",
    "KafkaJournalSettings",
    "KafkaSettings",
    "KafkaSinkSettings",
    "KafkaSourceSettings",
    "LoggingSettings",
    "PostgresSinkSettings",
    "Settings",
    "SchemaRegistrySettings",
    "SinkSettings",
    "SparkSettings",
    "json_schema",
    "load_settings",
    "storage_problems",
]

DEFAULTS_FILE = shipped_config_file("defaults.yaml")


class _Model(BaseModel):
    # Frozen: settings are read by many threads and must not change under them. Unknown keys
    # are errors so a typo is never silently ignored.
    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)


# --- Spark and Kafka -------------------------------------------------------------------------


class SparkSettings(_Model):
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


class KafkaSettings(_Model):
    bootstrap_servers: str = Field(min_length=1)
    """Comma-separated host:port list of brokers."""
    properties: dict[str, ConfValue] = Field(default_factory=dict)
    """Any librdkafka property (security.protocol, ssl.ca.location, sasl.mechanism, ...)."""
    secret_properties: dict[str, SecretStr] = Field(default_factory=dict)
    """librdkafka properties holding credentials (sasl.oauthbearer.client.secret, ...)."""
    sasl_password: SecretStr | None = None
    """Becomes librdkafka's sasl.password."""
    ssl_key_password: SecretStr | None = None
    """Becomes librdkafka's ssl.key.password."""
    require_replication: bool = False
    """Refuse to start when a topic dstreams reads, writes or would create has fewer replicas
    than min_replication_factor or a lower min.insync.replicas than min_insync_replicas; false
    logs a warning and sets dstreams_topic_under_replicated instead."""
    min_replication_factor: int = Field(default=3, ge=1)
    """Fewest replicas each topic should have (checked at start-up)."""
    min_insync_replicas: int = Field(default=2, ge=1)
    """Lowest min.insync.replicas each topic should have (checked at start-up)."""

    @field_validator("properties")
    @classmethod
    def _plain_properties_only(cls, properties: dict[str, str]) -> dict[str, str]:
        problems = [
            f"{key!r} is managed by dstreams: {why}"
            for key, why in MANAGED_KAFKA_KEYS.items()
            if key in properties
        ]
        problems += sensitive_keys(properties, "kafka.secret_properties (or kafka.sasl_password)")
        raise_all(problems)
        return properties

    @model_validator(mode="after")
    def _reachable_minimum(self) -> KafkaSettings:
        if self.min_insync_replicas > self.min_replication_factor:
            msg = (
                f"min_insync_replicas ({self.min_insync_replicas}) exceeds "
                f"min_replication_factor ({self.min_replication_factor}); a topic that met both "
                "could never take a write"
            )
            raise ValueError(msg)
        return self

    @model_validator(mode="after")
    def _one_place_per_secret(self) -> KafkaSettings:
        for field, key in (
            ("sasl_password", "sasl.password"),
            ("ssl_key_password", "ssl.key.password"),
        ):
            if getattr(self, field) is not None and key in self.secret_properties:
                msg = f"{key} is given twice, as kafka.{field} and in kafka.secret_properties"
                raise ValueError(msg)
        return self

    def librdkafka_config(self) -> dict[str, str]:
        """The client configuration with secrets revealed: pass it to librdkafka only."""
        conf = {"bootstrap.servers": self.bootstrap_servers, **self.properties}
        conf.update(
            {key: value.get_secret_value() for key, value in self.secret_properties.items()}
        )
        if self.sasl_password is not None:
            conf["sasl.password"] = self.sasl_password.get_secret_value()
        if self.ssl_key_password is not None:
            conf["ssl.key.password"] = self.ssl_key_password.get_secret_value()
        return conf


class SchemaRegistrySettings(_Model):
    url: str = Field(min_length=1)
    """http(s)://host:port of a Confluent-API schema registry (mock://NAME: confluent-kafka's
    in-process mock, for tests)."""
    basic_auth_user: str | None = None
    basic_auth_password: SecretStr | None = None
    """Masked when shown; with basic_auth_user, HTTP basic authentication."""
    ssl_ca_location: str | None = None
    """CA file that signed the registry's certificate (https)."""
    ssl_certificate_location: str | None = None
    ssl_key_location: str | None = None
    ssl_key_password: SecretStr | None = None

    @model_validator(mode="after")
    def _user_and_password_together(self) -> SchemaRegistrySettings:
        if (self.basic_auth_user is None) != (self.basic_auth_password is None):
            msg = "give both basic_auth_user and basic_auth_password, or neither"
            raise ValueError(msg)
        return self

    def client_config(self) -> dict[str, str]:
        """The registry client's settings with secrets revealed: pass them to the client only."""
        conf = {"url": self.url}
        if self.basic_auth_user is not None and self.basic_auth_password is not None:
            password = self.basic_auth_password.get_secret_value()
            conf["basic.auth.user.info"] = f"{self.basic_auth_user}:{password}"
        for key, value in (
            ("ssl.ca.location", self.ssl_ca_location),
            ("ssl.certificate.location", self.ssl_certificate_location),
            ("ssl.key.location", self.ssl_key_location),
        ):
            if value is not None:
                conf[key] = value
        if self.ssl_key_password is not None:
            conf["ssl.key.password"] = self.ssl_key_password.get_secret_value()
        return conf


def _schema_text(path: str | None) -> str | None:
    """The `.avsc` file at `path` as compact JSON, checked to be a valid Avro schema."""
    if path is None:
        return None
    from connectors.avro import read_schema_file

    try:
        return read_schema_file(path)
    except ConfigError as exc:
        raise ValueError(str(exc)) from None


class AvroReadSettings(_Model):
    writer_schema: str | None = None
    """.avsc file the records were written with: plain Avro binary. None: the Confluent wire
    format, with writer schemas fetched by id from schema_registry."""
    reader_schema: str | None = None
    """.avsc file to read with (Avro schema resolution: added fields take their defaults, removed
    fields are dropped); none means records come as written."""
    _texts: tuple[str | None, str | None] = PrivateAttr(default=(None, None))

    @model_validator(mode="after")
    def _schemas_parse(self) -> AvroReadSettings:
        self._texts = (_schema_text(self.writer_schema), _schema_text(self.reader_schema))
        return self

    def decoder(self, registry: SchemaRegistrySettings | None) -> AvroDecoder:
        from connectors.avro import AvroDecoder

        writer, reader = self._texts
        if writer is not None:
            return AvroDecoder(writer_schema=writer, reader_schema=reader)
        if registry is None:
            msg = "Avro needs avro.writer_schema (plain Avro) or schema_registry (wire format)"
            raise ConfigError(msg)
        return AvroDecoder(reader_schema=reader, registry=registry.client_config())


class AvroWriteSettings(_Model):
    schema_file: str | None = None
    """.avsc file of the values written. With schema_registry it must be registered under
    <topic>-value (or auto_register); none there means the subject's latest version."""
    key_schema_file: str | None = None
    """.avsc file of the keys (Kafka sink): keys are Avro only when this is given."""
    auto_register: bool = False
    """Register schema_file (and key_schema_file) under the topic's subjects at start-up; the
    registry refuses an incompatible schema and the service does not start."""
    _texts: tuple[str | None, str | None] = PrivateAttr(default=(None, None))

    @model_validator(mode="after")
    def _schemas_parse(self) -> AvroWriteSettings:
        self._texts = (_schema_text(self.schema_file), _schema_text(self.key_schema_file))
        return self

    @property
    def schema_text(self) -> str | None:
        return self._texts[0]

    def output(self, registry: SchemaRegistrySettings | None) -> AvroOutput:
        from connectors.avro import AvroOutput

        value, key = self._texts
        conf = registry.client_config() if registry is not None else None
        return AvroOutput(value, key, conf, self.auto_register)


# --- Sources ---------------------------------------------------------------------------------


class KafkaSourceSettings(_Model):
    topics: TopicList | None = None
    """Topics to read (or give pattern)."""
    pattern: str | None = None
    """Regular expression of topics to read (or give topics)."""
    starting_offsets: StartingOffsetsSetting = "latest"
    """Where the first batch ever starts: earliest, latest, committed (the group's offsets), a
    timestamp in ms, or a map "topic:partition" -> offset. Later batches follow the journal."""
    max_rate_per_partition: float | None = Field(default=None, gt=0)
    """Most records per second read from one partition; none means no limit."""
    min_partitions: int = Field(default=1, ge=1)
    """Fewest Spark partitions a batch's input is split into (large ranges are cut)."""
    max_partitions: int | None = Field(default=None, ge=1)
    """Most Spark partitions (tasks) that read a batch's input; small ranges share a task. None:
    one task per partition's range. Each task costs ~15 ms however little it reads, so on a few
    cores a small batch finishes sooner in about as many tasks as cores. Part of the graph's
    fingerprint (a replayed batch must be cut the same way): a change is refused at recovery."""
    codec: Literal["bytes", "utf-8", "json", "avro"] = "bytes"
    """How record values are decoded."""
    avro: AvroReadSettings = Field(default_factory=AvroReadSettings)
    """Schemas of Avro values (codec: avro)."""
    key_codec: Literal["bytes", "utf-8", "json", "avro"] = "bytes"
    """How record keys are decoded; a key that does not decode fails its record like a value."""
    key_avro: AvroReadSettings = Field(default_factory=AvroReadSettings)
    """Schemas of Avro keys (key_codec: avro)."""
    fail_on_data_loss: bool = True
    """Stop when offsets were deleted by retention before being read. false: skip them, count
    them in dstreams_lost_offsets_total and, when a replay skips them, journal them."""
    on_decode_error: Literal["fail", "skip"] = "fail"
    """A record that cannot be decoded (or whose parse function raises) when dead_letter.topic is
    not set: fail its batch with an error naming topic, partition and offset, or skip it (logged
    and counted in dstreams_decode_errors_total). With a dead-letter topic such records go
    there."""
    group_id: str | None = None
    """Consumer group the processed offsets are committed to, for lag tools only."""
    # `starting_offsets` in the planner's terms, made once by `_topics_or_pattern`.
    _starting: StartingOffsets = PrivateAttr(default_factory=StartingOffsets.latest)

    @property
    def starting(self) -> StartingOffsets:
        """`starting_offsets` as the planner takes it (the field keeps the form written)."""
        return self._starting

    def decoder(self, registry: SchemaRegistrySettings | None) -> str | Codec:
        """The codec reads use: a codec name, or an object when Avro or keys need settings."""
        from connectors.codecs import KeyedCodec

        value = self.avro.decoder(registry) if self.codec == "avro" else self.codec
        if self.key_codec == "bytes":
            return value
        key = self.key_avro.decoder(registry) if self.key_codec == "avro" else self.key_codec
        return KeyedCodec(value, key)

    def needs_registry(self) -> bool:
        """Whether reading needs schema_registry (Avro without a writer schema file)."""
        return (self.codec == "avro" and self.avro.writer_schema is None) or (
            self.key_codec == "avro" and self.key_avro.writer_schema is None
        )

    @field_validator("pattern")
    @classmethod
    def _compiles(cls, pattern: str | None) -> str | None:
        if pattern is not None:
            try:
                re.compile(pattern)
            except re.error as exc:
                msg = f"{pattern!r} is not a valid regular expression: {exc}"
                raise ValueError(msg) from None
        return pattern

    @field_validator("starting_offsets", mode="before")
    @classmethod
    def _starting_offsets(cls, value: object) -> StartingOffsetsSetting:
        return parse_starting_offsets(value)

    @model_validator(mode="after")
    def _topics_or_pattern(self) -> KafkaSourceSettings:
        if (self.topics is None) == (self.pattern is None):
            found = "both" if self.topics else "neither"
            msg = f"give exactly one of topics or pattern; found {found}"
            raise ValueError(msg)
        starting = starting_offsets_for_planner(self.starting_offsets)
        if self.topics is not None:
            unknown = sorted({topic for topic, _ in starting.offsets} - set(self.topics))
            if unknown:
                msg = f"starting_offsets names topics not in topics: {', '.join(unknown)}"
                raise ValueError(msg)
        self._starting = starting
        return self

    @model_validator(mode="after")
    def _partition_bounds(self) -> KafkaSourceSettings:
        if problem := partition_bounds_problem(self.min_partitions, self.max_partitions):
            raise ValueError(problem)
        return self


# --- Sinks -----------------------------------------------------------------------------------


class KafkaSinkSettings(_Model):
    type: Literal["kafka"]
    topic: TopicName
    partitions: int | None = Field(default=None, ge=1)
    """Partitions of the topic if dstreams creates it; none means default_partitions."""
    replication_factor: int = Field(default=1, ge=1)
    transaction_timeout_ms: DurationMs = 60_000
    """Must exceed a batch's write time and stay under the broker's transaction.max.timeout.ms
    (15 min by default); checked against the broker at start-up."""
    format: Literal["json", "utf-8", "bytes", "avro"] = "json"
    """How values are written; avro uses the avro settings (and schema_registry if set)."""
    avro: AvroWriteSettings = Field(default_factory=AvroWriteSettings)
    write_from: Literal["auto", "driver", "executors"] = "auto"
    """Which processes run the transactions: auto is the driver with a local master (its
    producers never move between Python workers, so none is re-initialised), else executors."""

    def needs_registry(self) -> bool:
        return self.format == "avro" and self.avro.schema_file is None

    def build(
        self,
        kafka: KafkaSettings,
        default_partitions: int,
        registry: SchemaRegistrySettings | None = None,
    ) -> KafkaSink:
        from sinks.kafka import KafkaSink

        partitions = self.partitions or default_partitions
        return KafkaSink(
            kafka.librdkafka_config(),
            self.topic,
            avro=self.avro.output(registry) if self.format == "avro" else None,
            serializer="json" if self.format == "avro" else self.format,
            partitions=partitions,
            replication_factor=self.replication_factor,
            transaction_timeout_ms=self.transaction_timeout_ms,
            # Marker partitions made at setup, for the usual number of tasks (a shuffle's, or
            # the topic's); the sink adds more before a write job with more tasks.
            marker_partitions=max(partitions, default_partitions),
            write_from=self.write_from,
        )


class PostgresSinkSettings(_Model):
    type: Literal["postgres"]
    dsn: SecretStr
    """libpq connection string or URL; masked when shown."""
    table: SqlName
    columns: SqlNames = Field(min_length=1)
    """Columns written, in the order of each row's fields."""
    key_columns: SqlNames = Field(default_factory=list)
    """Columns of the upsert key; empty means plain inserts."""
    column_types: dict[SqlName, str] = Field(default_factory=dict)
    """SQL type of every column (e.g. text, bigint); needed only if dstreams creates the table."""
    version_column: SqlName | None = None
    """With key_columns: a row is replaced only by one with a higher value here (e.g. the
    `revision` of event-time window results, so the table keeps the latest correction)."""

    @model_validator(mode="after")
    def _keys_are_columns(self) -> PostgresSinkSettings:
        if len(set(self.columns)) != len(self.columns):
            msg = f"columns repeat a name: {', '.join(self.columns)}"
            raise ValueError(msg)
        missing = [name for name in self.key_columns if name not in self.columns]
        if missing:
            msg = f"key_columns {', '.join(missing)} are not among columns {self.columns}"
            raise ValueError(msg)
        if self.column_types and set(self.column_types) != set(self.columns):
            msg = (
                f"column_types must name exactly the columns {self.columns}; "
                f"found {sorted(self.column_types)}"
            )
            raise ValueError(msg)
        return self

    def needs_registry(self) -> bool:
        return False

    def build(
        self,
        kafka: KafkaSettings,
        default_partitions: int,
        registry: SchemaRegistrySettings | None = None,
    ) -> PostgresSink:
        from sinks.postgres import PostgresSink

        return PostgresSink(
            self.dsn,
            self.table,
            columns=list(self.columns),
            key_columns=list(self.key_columns) or None,
            column_types=self.column_types or None,
            version_column=self.version_column,
        )


class FilesSinkSettings(_Model):
    type: Literal["files"]
    path: str = Field(min_length=1)
    """Directory; a batch lands in <path>/<output>/t=<batch time>/."""
    format: Literal["jsonl", "avro"] = "jsonl"
    """jsonl: one JSON value per line. avro: Avro object container files (avro.schema_file),
    byte for byte the same on every replay."""
    avro: AvroWriteSettings = Field(default_factory=AvroWriteSettings)

    @model_validator(mode="after")
    def _avro_needs_a_schema(self) -> FilesSinkSettings:
        if self.format == "avro" and self.avro.schema_file is None:
            msg = "format avro needs avro.schema_file (the .avsc file of the rows written)"
            raise ValueError(msg)
        return self

    def needs_registry(self) -> bool:
        return False

    def build(
        self,
        kafka: KafkaSettings,
        default_partitions: int,
        registry: SchemaRegistrySettings | None = None,
    ) -> FileSink:
        from sinks.files import FileSink

        return FileSink(self.path, avro_schema=self.avro.schema_text)


class ConsoleSinkSettings(_Model):
    type: Literal["console"]

    def needs_registry(self) -> bool:
        return False

    def build(
        self,
        kafka: KafkaSettings,
        default_partitions: int,
        registry: SchemaRegistrySettings | None = None,
    ) -> ConsoleSink:
        from sinks.console import ConsoleSink

        return ConsoleSink()


SinkSettings = Annotated[
    KafkaSinkSettings | PostgresSinkSettings | FilesSinkSettings | ConsoleSinkSettings,
    Field(discriminator="type"),
]
"""One output's sink; every member has `build(kafka, default_partitions, registry)` and
`needs_registry()`."""


# --- Service ---------------------------------------------------------------------------------


class DeadLetterSettings(_Model):
    topic: TopicName | None = None
    """Topic for records that fail to decode or process; none means fail the batch instead."""
    partitions: int = Field(default=1, ge=1)
    replication_factor: int = Field(default=1, ge=1)

    def build(self, kafka: KafkaSettings) -> DeadLetterSink:
        """The sink of every source's dead letters; only when `topic` is set."""
        from sinks.dead_letters import DeadLetterSink

        if self.topic is None:
            msg = "dead_letter.topic is not set, so there is no dead-letter sink to build"
            raise ConfigError(msg)
        return DeadLetterSink(
            kafka.librdkafka_config(),
            self.topic,
            partitions=self.partitions,
            replication_factor=self.replication_factor,
        )


class FileJournalSettings(_Model):
    type: Literal["file"] = "file"
    path: str = Field(default="state/journal", min_length=1)
    """Directory of the file journal (a persistent volume in Kubernetes)."""

    def build(self, app_id: str, kafka: KafkaSettings) -> FileJournal:
        from service.journal.file import FileJournal

        return FileJournal(Path(self.path))


class KafkaJournalSettings(_Model):
    type: Literal["kafka"]
    topic: TopicName
    """Single-partition topic of the kafka journal."""
    replication_factor: int = Field(default=1, ge=1)
    min_insync_replicas: int = Field(default=1, ge=1)

    @model_validator(mode="before")
    @classmethod
    def _needs_topic(cls, data: object) -> object:
        # Said in the words of the choice made: a bare "topic: required" would not say why.
        if isinstance(data, Mapping) and data.get("topic") is None:
            msg = "topic is required when type is kafka"
            raise ValueError(msg)
        return data

    @model_validator(mode="after")
    def _writable(self) -> KafkaJournalSettings:
        if self.min_insync_replicas > self.replication_factor:
            msg = (
                f"min_insync_replicas ({self.min_insync_replicas}) exceeds replication_factor "
                f"({self.replication_factor}); no write could ever succeed"
            )
            raise ValueError(msg)
        return self

    def build(self, app_id: str, kafka: KafkaSettings) -> KafkaJournal:
        from service.journal.kafka import KafkaJournal

        return KafkaJournal(
            kafka.librdkafka_config(),
            self.topic,
            app_id,
            self.replication_factor,
            self.min_insync_replicas,
        )


def _file_unless_typed(value: object) -> object:
    """A journal given without `type` is a file journal, as it always was."""
    if isinstance(value, Mapping) and "type" not in value:
        return {"type": "file", **value}
    return value


JournalSettings = Annotated[
    Annotated[FileJournalSettings | KafkaJournalSettings, Field(discriminator="type")],
    BeforeValidator(_file_unless_typed),
]
"""The driver's journal; every member has `build(app_id, kafka)`."""


class CheckpointSettings(_Model):
    path: str = Field(default="state/checkpoints", min_length=1)
    """Where state checkpoints go: a path every executor sees (local, or a mounted volume)."""
    interval_batches: int | None = Field(default=None, ge=1)
    """Checkpoint state (stateful jobs only) every this many batches; default: about 10 s."""


class HttpSettings(_Model):
    # All interfaces: in a pod, Prometheus and the kubelet's probes connect from outside.
    host: str = "0.0.0.0"  # noqa: S104
    port: int = Field(default=8080, ge=0, le=65535)
    """0 picks a free port (tests)."""
    unhealthy_after_s: float | None = Field(default=None, gt=0)
    """`/healthz` fails once no batch has started or finished for this long (a stuck batch, a
    stalled cluster). Default: 30 s or ten batch intervals, whichever is longer."""


class StandbySettings(_Model):
    """Warm standby (docs/architecture.md, Recovery): drivers wait, warm, for the journal's
    leadership before taking an epoch."""

    enabled: bool = False
    """Start Spark and the job, then wait until elected before taking the journal's next epoch.
    Every driver of the app must run with the same value (`dstreams run --standby`)."""
    session_timeout_ms: DurationMs = Field(default=6_000, ge=1)
    """Kafka journal: how long the brokers wait for a silent driver before electing another
    (librdkafka's session.timeout.ms). Brokers refuse values below their
    group.min.session.timeout.ms (6 s by default); lower it there for a faster take-over."""


class LoggingSettings(_Model):
    format: Literal["json", "text", "auto"] = "auto"
    """auto: text when stderr is a terminal, else JSON lines."""
    level: LogLevel = "INFO"


class BackpressureSettings(_Model):
    enabled: bool = False
    """Adapt per-partition rates so scheduling delay stops growing (Spark's PID estimator)."""
    initial_rate: float | None = Field(default=None, gt=0)
    """Records/s per partition for the first batches, before any measurement."""
    min_rate: float = Field(default=100.0, gt=0)
    """The estimator never goes below this many records/s per partition."""
    proportional: float = Field(default=1.0, ge=0)
    integral: float = Field(default=0.2, ge=0)
    derived: float = Field(default=0.0, ge=0)


class IngestSettings(_Model):
    """The HTTP ingest endpoint (`dstreams ingest`): records in, acknowledged once replicated."""

    enabled: bool = False
    """Also serve the endpoint inside `dstreams run` (`dstreams ingest` always serves it)."""
    # All interfaces: in a pod, clients connect from outside.
    host: str = "0.0.0.0"  # noqa: S104
    port: int = Field(default=8081, ge=0, le=65535)
    """0 picks a free port (tests)."""
    sources: list[Name] = Field(default_factory=list)
    """Sources that accept records at POST /ingest/<source>; each must read exactly one topic.
    Empty: every source that reads exactly one topic."""
    keys_topic: TopicName | None = None
    """Compacted topic of recent idempotency keys; none means dstreams.ingest-keys.<app_id>."""
    key_retention_ms: DurationMs = 86_400_000
    """How long an idempotency key is remembered after its request was acknowledged; a retry
    later than this is written again."""
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


class Settings(BaseSettings):
    """Everything a dstreams service reads at start-up."""

    model_config = SettingsConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    app_id: Name
    """Names the application in journal records, sink markers, transactional ids and metrics."""
    job: Annotated[str, AfterValidator(check_job)]
    """module:function that builds the job's graph."""
    batch_interval_ms: DurationMs = 1000
    """Batch interval; batch_interval: 1s is accepted as well."""
    default_partitions: int = Field(default=4, ge=1)
    """Partition count of shuffles and outputs unless an operator or sink says otherwise."""
    spark: SparkSettings = Field(default_factory=SparkSettings)
    kafka: KafkaSettings
    sources: dict[Name, KafkaSourceSettings] = Field(default_factory=dict)
    sinks: dict[Name, SinkSettings] = Field(default_factory=dict)
    dead_letter: DeadLetterSettings = Field(default_factory=DeadLetterSettings)
    journal: JournalSettings = Field(default_factory=FileJournalSettings)
    checkpoint: CheckpointSettings = Field(default_factory=CheckpointSettings)
    http: HttpSettings = Field(default_factory=HttpSettings)
    logging: LoggingSettings = Field(default_factory=LoggingSettings)
    backpressure: BackpressureSettings = Field(default_factory=BackpressureSettings)
    ingest: IngestSettings = Field(default_factory=IngestSettings)
    standby: StandbySettings = Field(default_factory=StandbySettings)
    schema_registry: SchemaRegistrySettings | None = None
    """Confluent-API schema registry for Avro in the wire format; none: Avro from .avsc files."""

    @model_validator(mode="after")
    def _avro_has_its_schemas(self) -> Settings:
        if self.schema_registry is not None:
            return self
        users = [f"sources.{name}" for name, s in self.sources.items() if s.needs_registry()]
        users += [f"sinks.{name}" for name, s in self.sinks.items() if s.needs_registry()]
        if users:
            msg = (
                f"{', '.join(users)} read or write Avro without a schema file, so they need "
                "schema_registry; set schema_registry.url or give the .avsc files"
            )
            raise ValueError(msg)
        return self

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # `load_settings` layers the file and the environment itself, so precedence is explicit
        # and each problem can name the variable it came from; nothing is read implicitly.
        return (init_settings,)

    def masked_dict(self) -> dict[str, Any]:
        """The settings as JSON-able data with every secret shown as '**********'."""
        return self.model_dump(mode="json")


def load_settings(
    path: Path | None,
    environ: Mapping[str, str] = os.environ,
    *,
    defaults: Path | None = DEFAULTS_FILE,
) -> Settings:
    """Settings from `defaults`, then the YAML file at `path`, then `DSTREAMS_` variables.

    Raises `InvalidConfig` (a `ConfigError`) with one line per problem.
    """
    layers: list[dict[str, Any]] = []
    if defaults is not None and defaults.exists():
        layers.append(_renamed(read_yaml(defaults)))
    if path is not None:
        layers.append(_renamed(read_yaml(path)))
    env, origins = read_env(environ, {*Settings.model_fields, "batch_interval"})
    layers.append(_renamed(env))
    origins = {_renamed_path(key): name for key, name in origins.items()}
    merged: dict[str, Any] = {}
    for layer in layers:
        merged = deep_merge(merged, layer)
    try:
        settings = Settings.model_validate(merged)
    except ValidationError as exc:
        raise InvalidConfig(problems_of(exc, Settings, merged, origins)) from None
    problems = storage_problems(settings)
    if problems:
        raise InvalidConfig(problems)
    return settings


def storage_problems(settings: Settings) -> list[str]:
    """On a cluster, what executors write (file outputs, checkpoints) must be on storage that
    all of them see: one line per path that is not (rules in `service.config.storage`)."""
    master = settings.spark.parsed_master
    found = [
        shared_path_problem(f"sinks.{name}.path", sink.path, master)
        for name, sink in settings.sinks.items()
        if isinstance(sink, FilesSinkSettings)
    ]
    found.append(
        shared_path_problem("checkpoint.path", settings.checkpoint.path, master, uris=True)
    )
    return [problem for problem in found if problem is not None]


def _renamed(layer: dict[str, Any]) -> dict[str, Any]:
    """`batch_interval: 1s` is spelled `batch_interval_ms` inside, so layers override it."""
    if "batch_interval" not in layer:
        return layer
    if "batch_interval_ms" in layer:
        msg = "batch_interval and batch_interval_ms are both given; keep one"
        raise InvalidConfig([msg])
    renamed = {key: value for key, value in layer.items() if key != "batch_interval"}
    renamed["batch_interval_ms"] = layer["batch_interval"]
    return renamed


def _renamed_path(path: tuple[str, ...]) -> tuple[str, ...]:
    return ("batch_interval_ms", *path[1:]) if path[:1] == ("batch_interval",) else path


def json_schema() -> dict[str, Any]:
    """JSON Schema (draft 2020-12) of the configuration file, generated from the models."""
    schema = Settings.model_json_schema()
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", **schema}
