"""`KafkaSource`: everything a Kafka source reads and plans with, as one immutable value.

A source's settings build it in one step (`KafkaSourceSettings.build` in `service.config`), as a
job does through `StreamingContext.kafka_stream`; the context then makes the stream around it,
with the driver-side clients that plan its batches. Nothing of a source is set afterwards: a
parse function gives a new value (`parsed_by`), never a changed one.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from connectors.codecs import Codec
from connectors.planner import StartingOffsets, partition_bounds_problem
from connectors.reader import DEFAULT_POLICY, ReadPolicy
from service.errors import ConfigError


@dataclass(frozen=True)
class KafkaSource:
    """What a Kafka source reads (topics or a pattern), from where, how fast, in how many tasks,
    decoded how, and what a read does with records it cannot hand on.

    >>> source = KafkaSource("lines", {"bootstrap.servers": "localhost:9092"}, topics=("b", "a"))
    >>> source.subscription, source.read_policy.fail_on_data_loss
    (['a', 'b'], True)
    >>> KafkaSource("lines", {}, pattern="logs-.*", min_partitions=4, max_partitions=2)
    ... # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    service.errors.ConfigError: source 'lines': max_partitions (2) is below min_partitions (4); ...
    """

    name: str
    consumer_conf: Mapping[str, Any]
    """librdkafka's configuration the source plans and reads with (bootstrap.servers, group.id,
    security); a copy is handed to each read."""
    topics: tuple[str, ...] | None = None
    """The topics read, or None with `pattern`."""
    pattern: str | None = None
    """A regular expression of the topics read, or None with `topics`."""
    starting: StartingOffsets = field(default_factory=StartingOffsets.earliest)
    """Where the first batch ever starts; later batches follow the journal."""
    max_rate_per_partition: float | None = None
    min_partitions: int = 1
    """Fewest tasks that read a batch (large ranges are cut, `connectors.planner`)."""
    max_partitions: int | None = None
    """Most tasks that read a batch (small ranges share one); None: one per range."""
    codec: str = "utf-8"
    """The name of the codec, as the graph describes the source."""
    decoder: Codec | None = None
    """A codec object that decodes instead of the named codec (Avro, keys, a parse function)."""
    read_policy: ReadPolicy = DEFAULT_POLICY
    """What a read does with undecodable records and deleted offsets (`connectors.reader`)."""
    parse: str | None = None
    """The qualified name of the function every value is parsed with, if any."""

    def __post_init__(self) -> None:
        if problem := partition_bounds_problem(self.min_partitions, self.max_partitions):
            msg = f"source {self.name!r}: {problem}"
            raise ConfigError(msg)

    @property
    def subscription(self) -> list[str] | str:
        """The sorted topics, or the pattern: how the graph describes what the source reads."""
        return sorted(self.topics) if self.topics is not None else str(self.pattern)

    @property
    def fail_on_data_loss(self) -> bool:
        """Planning and reads both stop at offsets retention deleted (else skip and report)."""
        return self.read_policy.fail_on_data_loss

    @property
    def reads_with(self) -> Codec | str:
        """What each read decodes with: the codec object if there is one, else the name."""
        return self.decoder if self.decoder is not None else self.codec

    def parsed_by(self, function: Callable[[Any], Any]) -> KafkaSource:
        """This source, with `function` applied to each decoded value while reading; a value it
        raises on becomes a dead letter (with its original bytes) instead of failing the batch."""
        from connectors.codecs import ParsingCodec

        name = f"{function.__module__}.{function.__qualname__}"
        return replace(self, decoder=ParsingCodec(self.reads_with, function), parse=name)
