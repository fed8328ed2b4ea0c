"""The service's configuration: frozen models, loaded from YAML with environment overrides on top.

Layers, lowest first: the models' defaults, `config/defaults.yaml` (when the tree ships it), the
user's file, then `DSTREAMS_A__B` variables (`DSTREAMS_HTTP__PORT=9000` sets `http.port`). Maps
merge key by key; anything else is replaced. The merged result is validated once, so every problem
is reported together, one line each (see `service.config.problems`).

Secrets are `SecretStr`: masked in `repr`, in `masked_dict()` and in error messages, and revealed
only by `KafkaSettings.librdkafka_config()`, `SparkSettings.spark_conf()` and the sink that needs
them.

Each source builds its `KafkaSource`, and each kind of sink and journal is one model of a
discriminated union (on `type`) that builds its object with `build(...)`, typed by what it needs:
an unknown kind cannot get past validation, and no other code decides which class a kind means.

The models live by concern: `kafka` (the cluster, the schema registry, Avro schema files),
`sources`, `sinks`, `journal` and `runtime` (Spark, checkpoints, HTTP, standby, logging,
backpressure, ingest). This module holds the root `Settings`, its loading and its JSON schema,
and re-exports every model.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any

from pydantic import AfterValidator, Field, ValidationError, model_validator
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from service.config.journal import FileJournalSettings, JournalSettings, KafkaJournalSettings
from service.config.kafka import (
    AvroReadSettings,
    AvroWriteSettings,
    KafkaSettings,
    SchemaRegistrySettings,
)
from service.config.loading import deep_merge, read_env, read_yaml
from service.config.paths import shipped_config_file
from service.config.problems import InvalidConfig, problems_of
from service.config.runtime import (
    BackpressureSettings,
    CheckpointSettings,
    HttpSettings,
    IngestSettings,
    LoggingSettings,
    SparkSettings,
    StandbySettings,
)
from service.config.sinks import (
    ConsoleSinkSettings,
    DeadLetterSettings,
    FilesSinkSettings,
    KafkaSinkSettings,
    PostgresSinkSettings,
    SinkSettings,
)
from service.config.sources import KafkaSourceSettings
from service.config.storage import shared_path_problem
from service.config.types import DurationMs, Name, check_job
from service.graph.layout import FIXED_DEFAULT_PARTITIONS

__all__ = [
    "DEFAULTS_FILE",
    "AvroReadSettings",
    "AvroWriteSettings",
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
    "SchemaRegistrySettings",
    "Settings",
    "SinkSettings",
    "SparkSettings",
    "StandbySettings",
    "json_schema",
    "load_settings",
    "storage_problems",
]

DEFAULTS_FILE = shipped_config_file("defaults.yaml")


class Settings(BaseSettings):
    """Everything a dstreams service reads at start-up."""

    model_config = SettingsConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    app_id: Name
    """Names the application in journal records, sink markers, transactional ids and metrics."""
    job: Annotated[str, AfterValidator(check_job)]
    """module:function that builds the job's graph."""
    batch_interval_ms: DurationMs = 1000
    """Batch interval; batch_interval: 1s is accepted as well."""
    default_partitions: int | None = Field(default=None, ge=1)
    """Partition count of shuffles and outputs unless an operator or sink says otherwise. Unset,
    each batch's shuffles (and its reads, unless a source sets max_partitions) take one task per
    core, fewer for a small batch (service.graph.layout), and stateful operators and created
    topics take 4."""
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

    @property
    def fixed_partitions(self) -> int:
        """`default_partitions`, or where it is unset, the count of what cannot follow one
        batch's size: topics dstreams creates, stateful operators."""
        return self.default_partitions or FIXED_DEFAULT_PARTITIONS

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


def storage_problems(settings: Settings, *, stateful: bool = False) -> list[str]:
    """On a cluster, what executors write (file outputs, and the checkpoints of a `stateful`
    graph) must be on storage that all of them see: one line per path that is not (rules in
    `service.config.storage`). Only the job's graph tells whether it is stateful, so settings
    alone check the file outputs; the driver checks the checkpoints once it has the graph."""
    master = settings.spark.parsed_master
    found = [
        shared_path_problem(f"sinks.{name}.path", sink.path, master)
        for name, sink in settings.sinks.items()
        if isinstance(sink, FilesSinkSettings)
    ]
    if stateful:
        checkpoints = settings.checkpoint.path
        found.append(shared_path_problem("checkpoint.path", checkpoints, master, uris=True))
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
