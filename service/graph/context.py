"""`StreamingContext`: the entry point a job uses to build its graph of DStreams.

A job is a plain function `build(ctx)` that asks the context for sources, chains operators and
declares outputs. The context only holds the graph; running it is `service.driver.engine`'s work.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from connectors.reader import ReadPolicy
from service.errors import ConfigError
from service.graph.base import Node, OutputOperation, QueryableState, StoredState
from service.graph.counters import CountersParam
from service.graph.disk_state import DiskKeyedState
from service.graph.dstream import DStream, StatefulDStream
from service.graph.kafka_source import KafkaSource
from service.graph.key_placement import key_placement
from service.graph.layout import FIXED_DEFAULT_PARTITIONS
from service.graph.placement import OutputPlacement
from service.graph.plan import BatchPlan
from service.graph.queryable import QueryableStates
from service.graph.sources import InputDStream, KafkaInputDStream, QueueInputDStream
from sinks.base import Sink

if TYPE_CHECKING:
    from connectors.codecs import Codec
    from connectors.planner import StartingOffsets
    from service.graph.checkpoint_files import CheckpointFiles

SinkFactory = Callable[[str], Sink]
SourceFactory = Callable[[str], KafkaSource]
"""The configured Kafka source of a name (`service.driver.wiring.make_kafka_source`)."""


class StreamingContext:
    """Holds one job's graph: input streams, derived streams and output operations."""

    def __init__(
        self,
        sc: Any,
        app_id: str,
        batch_interval_ms: int,
        default_partitions: int | None = 4,
        sink_factory: SinkFactory | None = None,
        source_factory: SourceFactory | None = None,
    ) -> None:
        if batch_interval_ms <= 0:
            msg = f"batch interval must be positive, got {batch_interval_ms} ms"
            raise ConfigError(msg)
        self.sc = sc
        self.app_id = app_id
        self.batch_interval_ms = batch_interval_ms
        # None leaves the layout to dstreams (`service.graph.layout`); stateful operators, whose
        # state is partitioned by it, then keep a fixed default.
        self.auto_layout = default_partitions is None
        self.default_partitions = default_partitions or FIXED_DEFAULT_PARTITIONS
        self.streams: list[Node] = []
        self.inputs: list[InputDStream] = []
        self.outputs: list[OutputOperation] = []
        self.dead_letters_enabled = False
        self.input_counters: Any = None
        self.placement = OutputPlacement()
        self._sink_factory = sink_factory
        self._source_factory = source_factory
        self._sources_by_name: dict[str, InputDStream] = {}
        self._closeables: list[Any] = []
        self.queries = QueryableStates(lambda: self.sc)
        """The keyed states named `.queryable(name)`, answered as of the last completed batch."""

    # --- graph building -------------------------------------------------------------------

    def register(self, stream: Node) -> int:
        """Adds a new stream to the graph; its id is its place in creation order."""
        self.streams.append(stream)
        if isinstance(stream, InputDStream):
            self.inputs.append(stream)
        return len(self.streams) - 1

    def queue_stream(self, batches: list[list[Any]], name: str = "queue") -> DStream:
        """A test source: the n-th batch reads `batches[n]` (an empty list after the last)."""
        stream = QueueInputDStream(self, name, batches)
        self._sources_by_name[name] = stream
        return stream

    def kafka_stream(
        self,
        name: str,
        kafka_conf: dict[str, Any],
        *,
        topics: list[str] | None = None,
        pattern: str | None = None,
        starting_offsets: StartingOffsets | None = None,
        max_rate_per_partition: float | None = None,
        min_partitions: int = 1,
        max_partitions: int | None = None,
        codec: str = "utf-8",
        decoder: Codec | None = None,
        fail_on_data_loss: bool = True,
    ) -> KafkaInputDStream:
        """A direct Kafka source: each batch reads planned offset ranges, fetched by executors.
        `kafka_conf`: librdkafka's (at least `bootstrap.servers`). Elements are `SourceRecord`s;
        the first batch ever starts at `starting_offsets` (None: earliest). A batch is read by at
        least `min_partitions` tasks and at most `max_partitions` (`connectors.planner`). A
        `decoder` object (Avro, keys) decodes instead of the `codec` named."""
        from connectors.planner import StartingOffsets

        source = KafkaSource(
            name,
            dict(kafka_conf),
            topics=tuple(topics) if topics is not None else None,
            pattern=pattern,
            starting=starting_offsets or StartingOffsets.earliest(),
            max_rate_per_partition=max_rate_per_partition,
            min_partitions=min_partitions,
            max_partitions=max_partitions,
            codec=codec,
            decoder=decoder,
            read_policy=ReadPolicy(fail_on_data_loss=fail_on_data_loss),
        )
        return self.add_kafka_source(source)

    def add_kafka_source(self, source: KafkaSource) -> KafkaInputDStream:
        """The stream of `source`, with the driver-side clients that plan its batches."""
        from connectors.planner import ConfluentMetadata, OffsetPlanner

        self._check_new_source(source.name)
        metadata = ConfluentMetadata(dict(source.consumer_conf))
        self._closeables.append(metadata)
        planner = OffsetPlanner(
            metadata,
            topics=list(source.topics) if source.topics is not None else None,
            pattern=source.pattern,
            starting=source.starting,
            max_rate_per_partition=source.max_rate_per_partition,
            fail_on_data_loss=source.fail_on_data_loss,
        )
        stream = KafkaInputDStream(self, source, planner, metadata)
        self._sources_by_name[source.name] = stream
        return stream

    def _check_new_source(self, name: str) -> None:
        if name in self._sources_by_name:
            msg = f"source {name!r} is declared twice; give each source its own name"
            raise ConfigError(msg)

    def consumer_lag(self) -> dict[tuple[str, int], int]:
        """Records waiting behind the last planned batch, per Kafka partition."""
        lag: dict[tuple[str, int], int] = {}
        for source in self.inputs:
            if isinstance(source, KafkaInputDStream):
                lag.update(source.lag())
        return lag

    def lost_offsets(self) -> dict[tuple[str, int], int]:
        """Offsets planning skipped because retention deleted them, per partition, since start."""
        lost: dict[tuple[str, int], int] = {}
        for source in self.inputs:
            if isinstance(source, KafkaInputDStream):
                lost.update(source.planner.lost_offsets())
        return lost

    def source(self, name: str, parse: Callable[[Any], Any] | None = None) -> DStream:
        """The decoded values of the Kafka source configured under `name`.

        `parse(value)` runs on each value as it is read (validate, convert, enrich); a record it
        raises on goes to the dead letters with its original bytes instead of failing the batch.
        """
        return self.kafka_records(name, parse).values()

    def kafka_records(
        self, name: str, parse: Callable[[Any], Any] | None = None
    ) -> KafkaInputDStream:
        """The raw records (with topic, partition, offset, decode errors) of source `name`,
        built once from its configuration; `parse` as in `source`."""
        existing = self._sources_by_name.get(name)
        if isinstance(existing, KafkaInputDStream):
            if parse is not None:
                msg = (
                    f"source {name!r} is read already, and a source is read one way; give its "
                    "parse function the first time the job asks for it"
                )
                raise ConfigError(msg)
            return existing
        if self._source_factory is None:
            msg = f"source {name!r} was asked for, but this context has no Kafka configuration"
            raise ConfigError(msg)
        source = self._source_factory(name)
        return self.add_kafka_source(source if parse is None else source.parsed_by(parse))

    def add_output(self, output: OutputOperation) -> None:
        if any(existing.name == output.name for existing in self.outputs):
            msg = f"output {output.name!r} is declared twice; give each output its own name"
            raise ConfigError(msg)
        self.outputs.append(output)

    def add_queryable(self, name: str, state: QueryableState | StoredState) -> None:
        self.queries.add(name, state)

    def configured_sink(self, name: str) -> Sink:
        if self._sink_factory is None:
            msg = f"output {name!r} names no sink and this context has no configured sinks"
            raise ConfigError(msg)
        return self._sink_factory(name)

    # --- identity -------------------------------------------------------------------------

    def fingerprint(self, *, with_key_placement: bool = True) -> str:
        """A hash of what shapes output: operators, partition counts, outputs and their sinks,
        and what places keys in partitions (`service.graph.key_placement`).

        A recovering driver compares it with the journal's, because replaying journaled ranges
        through a different graph would silently write different data under the same keys.
        Without the key placement it is the fingerprint of journals written before dstreams
        recorded it. Function bodies are not in it: a job may fix a function and recover.
        """
        graph_json = self.graph_json(with_key_placement=with_key_placement)
        return hashlib.sha256(graph_json.encode()).hexdigest()[:16]

    def graph_json(self, *, with_key_placement: bool = True) -> str:
        graph: dict[str, Any] = {
            "streams": [stream.describe() for stream in self.streams],
            "outputs": [output.describe() for output in self.outputs],
        }
        if with_key_placement:
            graph["key_placement"] = key_placement()
        return json.dumps(graph, sort_keys=True, default=str)

    def attach_spark(self, sc: Any, stable_placement: bool = False) -> None:
        """Gives the built graph the SparkContext its batches run on.

        Until then `sc` is None: jobs build graphs without Spark, and use Spark only inside
        the functions they pass to operators (`transform` gets each batch's RDD).
        `stable_placement` pins each output partition's task to one executor on a cluster
        (see `service.graph.placement`).
        """
        self.sc = sc
        self.input_counters = sc.accumulator({}, CountersParam())
        self.placement.active = stable_placement

    def place_state(self, files: CheckpointFiles, local_dir: Path) -> None:
        """Where the graph's states on disk keep their files: durable changes and snapshots in
        the checkpoint store's `files`, local stores under `local_dir` (on every executor's
        disk; see `service.graph.disk_state`)."""
        for stream in self.stateful_streams():
            if isinstance(stream.computation, DiskKeyedState):
                name = stream.piece_prefix.rstrip("-")
                stream.computation.use_storage(files, local_dir / self.app_id, name)

    def close(self) -> None:
        """Closes the driver-side clients the sources and the outputs' sinks opened."""
        while self._closeables:
            self._closeables.pop().close()
        for output in self.outputs:
            output.close()

    def stateful_streams(self) -> list[StatefulDStream]:
        """The graph's window and state streams, parents before children."""
        return [stream for stream in self.streams if isinstance(stream, StatefulDStream)]

    # --- per-batch bookkeeping ------------------------------------------------------------

    def step_stateful(self, plan: BatchPlan) -> None:
        """Builds every stateful stream's RDD of the batch (no Spark job runs) before the
        outputs run: a stateful stream must see every batch in order, whether or not an output
        reads it now."""
        for stream in self.stateful_streams():
            stream.rdd_at(plan)

    def catch_up_stateful(self, plans: list[BatchPlan]) -> None:
        """Recovery: steps the stateful streams through completed batches (no output runs).

        A stream no other stateful stream reads may fold all of them into one RDD, with the
        next batch it computes (a keyed state does: `KeyedState.catch_up`), since nothing needs
        its RDDs in between; the others are computed batch by batch, as the first time."""
        streams = self.stateful_streams()
        read = {id(s) for s in streams if any(o.reads(s) for o in streams)}
        for plan in plans:
            for stream in streams:
                stream.catch_up(plan, fold=id(stream) not in read)
            self.forget(plan.batch_time)
        for stream in streams:
            stream.end_catch_up()

    def forget(self, batch_time: int) -> None:
        """Releases RDDs of batches up to `batch_time`; they will not be read again."""
        for stream in self.streams:
            stream.forget(batch_time)
