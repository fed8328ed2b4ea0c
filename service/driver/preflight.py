"""What the driver checks before it starts Spark, one named step each, in order; `dstreams check`
runs the very same steps without starting anything (docs/architecture.md, "Clear failures").

1. `credentials`: on a secured cluster the brokers accept the client's TLS and SASL settings.
2. `job`: the job's module imports and its `build(ctx)` builds a graph with outputs.
3. `acls`: on a secured cluster, every ACL the job's sources, outputs and journal need.
4. `storage`: what executors write is on storage they all see, and every path is writable.
5. `replication`: every topic of the job meets the replication the settings require.
6. `sinks`: each Kafka output's transaction timeout is within the brokers' limit, and its Avro
   subjects are in the schema registry.
7. `journal`: the journal reads and validates, and the job's graph is the one that planned its
   batches, so a restart recovers (replaying what is pending) instead of refusing.

The driver stops at the first failure (a `DStreamsError`: exit 2 for a `ConfigError`, 4 for any
other, `service.driver.engine`). `dstreams check` goes on where later steps do not need the
failed one, and runs one step the driver does not (`BROKERS`): a driver waits for brokers that do
not answer yet, a check says so at once.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from service.config.settings import InvalidConfig, Settings, storage_problems
from service.config.sinks import FilesSinkSettings
from service.config.storage import writable_problem
from service.driver.access import check_kafka_credentials, check_kafka_permissions
from service.driver.recovery import check_before_start, check_graph
from service.driver.replication import check_replication
from service.driver.scheduler import now_ms
from service.errors import ConfigError, DStreamsError
from service.graph.context import StreamingContext
from service.graph.sources import KafkaInputDStream
from service.journal.base import Journal, JournalState

log = logging.getLogger(__name__)

Job = Callable[[StreamingContext], None]
# `dstreams check` asks the brokers for their metadata once; a cluster slower than this to answer
# is as good as unreachable to a CI step or an upgrade hook.
BROKERS_TIMEOUT_S = 10.0


class BrokersUnreachable(DStreamsError):
    """No Kafka broker answered `dstreams check` in time."""


class UnderReplicatedGauge(Protocol):
    def set_topic_under_replicated(self, topic: str, role: str, under: bool) -> None: ...


@dataclass
class Preflight:
    """What the steps find along the way: the job's graph and the journal are the driver's to
    use (and to close) once every step has passed."""

    settings: Settings
    metrics: UnderReplicatedGauge
    secured: bool = False
    ctx: StreamingContext | None = None
    journal: Journal | None = None
    state: JournalState | None = None
    warnings: list[str] = field(default_factory=list)

    @property
    def graph(self) -> StreamingContext:
        if self.ctx is None:
            msg = "the job's graph is not built yet: the job step runs before this one"
            raise RuntimeError(msg)
        return self.ctx

    def close(self) -> None:
        if self.journal is not None:
            self.journal.close()
        if self.ctx is not None:
            self.ctx.close()


@dataclass(frozen=True)
class StartupCheck:
    """One step: `run` raises a `DStreamsError` naming what is wrong, or says what it found."""

    name: str
    run: Callable[[Preflight], str]
    needs: tuple[str, ...] = ()
    """Steps whose failure leaves nothing for this one to check."""


def run_startup_checks(preflight: Preflight) -> None:
    """The driver's way: every step in order; the first failure raises."""
    for check in STARTUP_CHECKS:
        log.info("start-up check %s: %s", check.name, check.run(preflight))


# --- the steps ---------------------------------------------------------------------------------


def _brokers(preflight: Preflight) -> str:
    from connectors.kafka_client import new_admin_client

    kafka = preflight.settings.kafka
    admin = new_admin_client(kafka.librdkafka_config())
    try:
        brokers = admin.list_topics(timeout=BROKERS_TIMEOUT_S).brokers
    except Exception as error:  # librdkafka's KafkaException: no broker answered in time
        msg = (
            f"no Kafka broker at {kafka.bootstrap_servers} answered within "
            f"{BROKERS_TIMEOUT_S:.0f} s ({error}); check kafka.bootstrap_servers, the network "
            "between here and the brokers, and that the brokers run"
        )
        raise BrokersUnreachable(msg) from None
    return f"{len(brokers)} brokers answer at {kafka.bootstrap_servers}"


def _credentials(preflight: Preflight) -> str:
    # Credentials, TLS and ACLs first: a refusal is one message now, not a retry loop later.
    preflight.secured = check_kafka_credentials(preflight.settings)
    if preflight.secured:
        protocol = preflight.settings.kafka.librdkafka_config().get("security.protocol")
        return f"the brokers accept this client's {protocol} settings"
    return "PLAINTEXT: no credentials to check"


def _job(preflight: Preflight) -> str:
    ctx = preflight.ctx = build_context(preflight.settings)
    sources = ", ".join(source.name for source in ctx.inputs) or "none"
    outputs = ", ".join(output.name for output in ctx.outputs)
    return f"{preflight.settings.job} builds: sources {sources}; outputs {outputs}"


def _acls(preflight: Preflight) -> str:
    if not preflight.secured:
        return "PLAINTEXT: no ACLs to check"
    check_kafka_permissions(preflight.settings, preflight.graph)
    return "every ACL the job needs is granted"


def _storage(preflight: Preflight) -> str:
    check_storage(preflight.settings, preflight.graph)
    return "every path is writable, and shared wherever executors write"


def _replication(preflight: Preflight) -> str:
    recorder = _ShortfallRecorder(preflight.metrics)
    check_replication(preflight.settings, preflight.graph, recorder)
    kafka = preflight.settings.kafka
    if recorder.short:
        warning = (
            f"under-replicated (kafka.require_replication is off, so the service starts): "
            f"{', '.join(recorder.short)}"
        )
        preflight.warnings.append(warning)
        return warning
    return (
        f"every topic meets replication factor {kafka.min_replication_factor} and "
        f"min.insync.replicas {kafka.min_insync_replicas}"
    )


def _sinks(preflight: Preflight) -> str:
    from sinks.kafka import KafkaSink

    checked = []
    for output in preflight.graph.outputs:
        sink = getattr(output, "sink", None)
        if isinstance(sink, KafkaSink):
            sink.check_limits()
            checked.append(output.name)
    if not checked:
        return "no Kafka outputs"
    return f"Kafka outputs {', '.join(checked)}: transaction timeout and schemas accepted"


def _journal(preflight: Preflight) -> str:
    from service.driver.wiring import make_journal

    preflight.journal = make_journal(preflight.settings)
    state = preflight.state = check_before_start(preflight.journal, preflight.graph)
    if not state.planned:
        return "empty: a first start"
    pending = len(state.pending())
    rescaled = check_graph(state, preflight.graph)
    graph = "the graph is the one that planned them"
    if rescaled:
        streams = ", ".join(f"stream {node} (from {count})" for node, count in rescaled.items())
        graph += f" but for state partition counts, rescaled after the replay: {streams}"
    return (
        f"{len(state.planned)} batches planned (last {max(state.planned)}), {pending} pending; "
        f"{graph}: a restart recovers, replaying {pending}"
    )


class _ShortfallRecorder:
    """Passes each topic's result on to the metrics, and keeps the under-replicated ones."""

    def __init__(self, metrics: UnderReplicatedGauge) -> None:
        self.metrics = metrics
        self.short: list[str] = []

    def set_topic_under_replicated(self, topic: str, role: str, under: bool) -> None:
        self.metrics.set_topic_under_replicated(topic, role, under)
        if under:
            self.short.append(topic)


BROKERS = StartupCheck("brokers", _brokers)
STARTUP_CHECKS = (
    StartupCheck("credentials", _credentials, ("brokers",)),
    StartupCheck("job", _job),
    StartupCheck("acls", _acls, ("credentials", "job")),
    StartupCheck("storage", _storage, ("job",)),
    StartupCheck("replication", _replication, ("brokers", "credentials", "job")),
    StartupCheck("sinks", _sinks, ("brokers", "credentials", "job")),
    StartupCheck("journal", _journal, ("job",)),
)


# --- what the steps use ------------------------------------------------------------------------


def load_job(reference: str) -> Job:
    """Imports `module:function`, with a clear error when either part is missing."""
    module_name, _, function_name = reference.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        msg = f"job {reference!r}: cannot import module {module_name!r} ({error})"
        raise ConfigError(msg) from error
    job = getattr(module, function_name, None)
    if not callable(job):
        msg = f"job {reference!r}: module {module_name!r} has no function {function_name!r}"
        raise ConfigError(msg)
    return job  # type: ignore[no-any-return] # checked callable above


def build_context(settings: Settings) -> StreamingContext:
    """The job's graph, with sources and sinks made from `settings`.

    Spark is not needed to build it (it comes later, through `attach_spark`), so a driver can
    check the graph against its journal before paying for Spark's start.
    """
    from service.driver import late_records, wiring

    ctx = StreamingContext(
        None,
        settings.app_id,
        settings.batch_interval_ms,
        settings.default_partitions,
        sink_factory=lambda name: wiring.make_sink(settings, name),
        source_factory=lambda name: wiring.make_kafka_source(settings, name),
    )
    ctx.dead_letters_enabled = settings.dead_letter.topic is not None
    load_job(settings.job)(ctx)
    for source in ctx.inputs:
        if isinstance(source, KafkaInputDStream):
            # The scheduler's batch times follow the wall clock: a batch of the down time may
            # be planned empty from memory (`connectors.planner`, docs/architecture.md).
            source.planner.clock_ms = now_ms
    if ctx.dead_letters_enabled:
        wiring.add_dead_letter_outputs(settings, ctx)
    late_records.add_late_record_outputs(settings, ctx)
    if not ctx.outputs:
        msg = f"job {settings.job!r} declared no outputs; call stream.write(name) at least once"
        raise ConfigError(msg)
    return ctx


def check_storage(settings: Settings, ctx: StreamingContext) -> None:
    """Refuses (`InvalidConfig`) a path that executors write but not all of them see, or that
    this process cannot write. Settings not made by load_settings (tests, embedders) are checked
    here too, and the checkpoint path only where the graph keeps state: a stateless job never
    writes a checkpoint. A store on object storage must answer (`ObjectStorageError`)."""
    stateful = bool(ctx.stateful_streams())
    problems = storage_problems(settings, stateful=stateful)
    problems += [p for p in _unwritable(settings, stateful) if p is not None]
    if problems:
        raise InvalidConfig(problems)
    if stateful:  # a store on object storage must answer now, not at the first checkpoint
        settings.checkpoint.store().files.check_reachable()


def _unwritable(settings: Settings, stateful: bool) -> list[str | None]:
    paths = [
        (f"sinks.{name}.path", sink.path)
        for name, sink in settings.sinks.items()
        if isinstance(sink, FilesSinkSettings)
    ]
    if stateful:
        paths.append(("checkpoint.path", settings.checkpoint.path))
    problems = [writable_problem(setting, path) for setting, path in paths]
    journal_path = getattr(settings.journal, "path", None)
    if settings.journal.type == "file" and isinstance(journal_path, str):
        problems.append(writable_problem("journal.path", journal_path, folder=False))
    return problems
