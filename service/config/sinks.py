"""The settings of each kind of sink (`sinks.<name>`) and of the dead-letter sink.

Each kind is one model of a discriminated union on `type` and builds its sink with
`build(where)`, `where` being the `SinkBuildContext` every kind is built in:
an unknown kind cannot get past validation, and no other code decides which class a kind means.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Literal

from pydantic import Field, SecretStr, model_validator

from service.config.kafka import AvroWriteSettings, KafkaSettings, SchemaRegistrySettings
from service.config.model import ConfigModel
from service.config.types import DurationMs, SqlName, SqlNames, TopicName
from service.errors import ConfigError

if TYPE_CHECKING:
    # Built objects only: importing them at run time would load Kafka and PostgreSQL clients
    # into every process that merely reads its configuration.
    from sinks.console import ConsoleSink
    from sinks.dead_letters import DeadLetterSink
    from sinks.files import FileSink
    from sinks.kafka import KafkaSink
    from sinks.postgres import PostgresSink


@dataclass(frozen=True)
class SinkBuildContext:
    """Where a sink is built: the settings outside `sinks.<name>` that a kind may need.

    One value for every kind, so that adding what one kind needs changes no other signature.
    """

    kafka: KafkaSettings
    default_partitions: int
    """Partitions of a shuffle (and of a created topic that names none)."""
    registry: SchemaRegistrySettings | None = None
    local_master: bool = False
    """Whether the configured Spark master is local (where a Kafka sink's transactions run)."""


class KafkaSinkSettings(ConfigModel):
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
    outage_limit_ms: DurationMs = 300_000
    """How long the cluster may be unanswering (every broker down, no leader) before the
    service stops: meanwhile the batch waits and retries with backoff, and /readyz is not
    ready."""

    def needs_registry(self) -> bool:
        return self.format == "avro" and self.avro.schema_file is None

    def build(self, where: SinkBuildContext) -> KafkaSink:
        from sinks.kafka import KafkaSink

        partitions = self.partitions or where.default_partitions
        return KafkaSink(
            where.kafka.librdkafka_config(),
            self.topic,
            avro=self.avro.output(where.registry) if self.format == "avro" else None,
            serializer="json" if self.format == "avro" else self.format,
            partitions=partitions,
            replication_factor=self.replication_factor,
            transaction_timeout_ms=self.transaction_timeout_ms,
            # Marker partitions made at setup, for the usual number of tasks (a shuffle's, or
            # the topic's); the sink adds more before a write job with more tasks.
            marker_partitions=max(partitions, where.default_partitions),
            write_from=self.write_from,
            local_master=where.local_master,
            outage_limit_s=self.outage_limit_ms / 1000,
        )


class PostgresSinkSettings(ConfigModel):
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
    outage_limit_ms: DurationMs = 300_000
    """How long the server may be down (unreachable) before the service stops: meanwhile the
    batch waits and retries with backoff, and /readyz is not ready."""

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

    def build(self, where: SinkBuildContext) -> PostgresSink:
        from sinks.postgres import PostgresSink

        return PostgresSink(
            self.dsn,
            self.table,
            columns=list(self.columns),
            key_columns=list(self.key_columns) or None,
            column_types=self.column_types or None,
            version_column=self.version_column,
            outage_limit_s=self.outage_limit_ms / 1000,
        )


class FilesSinkSettings(ConfigModel):
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

    def build(self, where: SinkBuildContext) -> FileSink:
        from sinks.files import FileSink

        return FileSink(self.path, avro_schema=self.avro.schema_text)


class ConsoleSinkSettings(ConfigModel):
    type: Literal["console"]

    def needs_registry(self) -> bool:
        return False

    def build(self, where: SinkBuildContext) -> ConsoleSink:
        from sinks.console import ConsoleSink

        return ConsoleSink()


SinkSettings = Annotated[
    KafkaSinkSettings | PostgresSinkSettings | FilesSinkSettings | ConsoleSinkSettings,
    Field(discriminator="type"),
]
"""One output's sink; every member has `build(where: SinkBuildContext)` and `needs_registry()`."""


class DeadLetterSettings(ConfigModel):
    topic: TopicName | None = None
    """Topic for records that fail to decode or process; none means fail the batch instead."""
    partitions: int = Field(default=1, ge=1)
    replication_factor: int = Field(default=1, ge=1)

    def build(self, kafka: KafkaSettings, *, local_master: bool = False) -> DeadLetterSink:
        """The sink of every source's dead letters; only when `topic` is set. `local_master`:
        the configured Spark master is local (where its transactions run, `write_from`)."""
        from sinks.dead_letters import DeadLetterSink

        if self.topic is None:
            msg = "dead_letter.topic is not set, so there is no dead-letter sink to build"
            raise ConfigError(msg)
        return DeadLetterSink(
            kafka.librdkafka_config(),
            self.topic,
            partitions=self.partitions,
            replication_factor=self.replication_factor,
            local_master=local_master,
        )
