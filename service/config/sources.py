"""The settings of a Kafka source (`sources.<name>`): they build the source's immutable
`KafkaSource` in one step (`KafkaSourceSettings.build`).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Literal

from pydantic import Field, PrivateAttr, field_validator, model_validator

from connectors.planner import StartingOffsets, partition_bounds_problem
from service.config.kafka import AvroReadSettings, KafkaSettings, SchemaRegistrySettings
from service.config.model import ConfigModel
from service.config.types import (
    StartingOffsetsSetting,
    TopicList,
    parse_starting_offsets,
    starting_offsets_for_planner,
)

if TYPE_CHECKING:
    from connectors.codecs import Codec

    # The built object only: importing it at run time would load the Kafka reader into every
    # process that merely reads its configuration.
    from service.graph.kafka_source import KafkaSource


class KafkaSourceSettings(ConfigModel):
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

    def build(
        self,
        name: str,
        kafka: KafkaSettings,
        app_id: str,
        registry: SchemaRegistrySettings | None = None,
        *,
        dead_letters: bool = False,
    ) -> KafkaSource:
        """Source `name`, as its plans and reads need it. `dead_letters`: a dead-letter topic is
        configured. Without one an undecodable record would vanish, so only an explicit
        `on_decode_error: skip` lets it go (docs/architecture.md, "No silent loss")."""
        from connectors.reader import ReadPolicy
        from service.graph.kafka_source import KafkaSource

        decoder = self.decoder(registry)
        return KafkaSource(
            name,
            {**kafka.librdkafka_config(), "group.id": self.group_id or app_id},
            topics=tuple(self.topics) if self.topics else None,
            pattern=self.pattern,
            starting=self.starting,
            max_rate_per_partition=self.max_rate_per_partition,
            min_partitions=self.min_partitions,
            max_partitions=self.max_partitions,
            codec=self.codec,
            decoder=None if isinstance(decoder, str) else decoder,
            read_policy=ReadPolicy(
                fail_on_decode_error=not dead_letters and self.on_decode_error == "fail",
                fail_on_data_loss=self.fail_on_data_loss,
            ),
        )

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
