"""Assembles a running service from settings: Spark, the job's graph, journal, recovery, clock.

`run_service(settings)` is what `dstreams run` calls. It returns the process exit code:
0 after a graceful stop, 3 when a newer driver fenced this one out. It raises what refuses a
start (`ConfigError`: exit 2; any other `DStreamsError`: exit 4), and `FailedWhileRunning`
(exit 5) once a batch has begun or recovery has finished: from then on a failure is not a
refusal to start. A sink's server down past its outage limit (`SinkUnavailable`) and a full
volume (`DiskFull`) are exit 5 at start-up as well: passing causes, which a restart outlives.
"""

from __future__ import annotations

import logging
import re
import signal
import tempfile
import time
from pathlib import Path
from types import FrameType
from typing import Any

from service.config.settings import Settings
from service.driver.checkpoints import (
    CheckpointObserver,
    StateCheckpoints,
    default_interval_batches,
)
from service.driver.class_archive import describe_archive
from service.driver.election import Election, make_election, warm_python_workers
from service.driver.job_code import prepare_executors
from service.driver.lifecycle import BatchLifecycle
from service.driver.marker_retention import ForgettingJournal
from service.driver.preflight import Preflight, run_startup_checks
from service.driver.preflight import build_context as build_context  # its home until preflight
from service.driver.preflight import check_storage as check_storage
from service.driver.preflight import load_job as load_job
from service.driver.recovery import JournalLog, recover
from service.driver.scheduler import Scheduler
from service.driver.sink_outages import SinkOutages
from service.driver.spark import create_spark_context, driver_address
from service.driver.warm_state import PreloadedCheckpoint, StatePreloader
from service.errors import DStreamsError, FencedOut
from service.graph.context import StreamingContext
from service.graph.key_placement import driver_hashes_like_workers
from service.graph.layout import describe_layout
from service.graph.sources import KafkaInputDStream
from service.journal.base import Journal
from service.observe import logs
from service.observe.status import RECOVERING, STANDBY

log = logging.getLogger(__name__)
# The exit codes of `dstreams run` (the README's table; the Helm chart's comments follow it).
EXIT_OK = 0
"""Stopped gracefully (SIGTERM, SIGINT), or a standby stopped before it was elected."""
EXIT_CONFIG = 2
"""Bad configuration: fix it; a restart alone fails the same way."""
EXIT_FENCED = 3
"""A newer driver of the app took the journal: this one stops and must not come back as it."""
EXIT_REFUSED = 4
"""Refused at start-up, before any batch: journal damaged, graph changed, offsets lost, topics
under-replicated, access denied, cluster unusable. Needs a person; a restart fails the same way."""
EXIT_FAILED = 5
"""Failed while running: a batch (new or replayed) failed. A restart replays it from the
journal, which helps when the cause was passing (a broker, an executor, a sink down). Also a
sink's server down past its `outage_limit_ms`, or a full volume, at start-up too
(`SinkUnavailable`, `DiskFull`)."""
# The log line's prefix once Spark has started: refusals must come before it.
SPARK_UP = "Spark started"

# The line naming an exception in a Python traceback (an executor's, inside a Spark job's error).
_EXCEPTION_LINE = re.compile(r"^(?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*: \S")


class FailedWhileRunning(DStreamsError):
    """A batch failed once the service was running (exit 5); the cause is chained."""


def failure_summary(error: BaseException) -> str:
    r"""One line for `error`: a failed Spark job's message holds the executor's Python traceback
    and the JVM's stack, so the line naming the Python exception stands for it when there is one.

    >>> failure_summary(ValueError("bad value"))
    'ValueError: bad value'
    >>> spark = ["Job aborted", "PythonException: Traceback (most recent call last):", '  File "x"',
    ...          "connectors.reader.UndecodableRecord: t-0 offset 3", "\tat org.apache.Foo"]
    >>> failure_summary(RuntimeError("\n".join(spark)))
    'connectors.reader.UndecodableRecord: t-0 offset 3'
    """
    lines = str(error).splitlines()
    if any("Traceback (most recent call last)" in line for line in lines):
        named = [line for line in lines if _EXCEPTION_LINE.match(line)]
        if named:
            return named[-1]
    first = next((line.strip() for line in lines if line.strip()), "")
    return f"{type(error).__name__}: {first}"


class Service:
    """One driver: owns the Spark context, the journal epoch, the HTTP endpoint and the clock."""

    def __init__(self, settings: Settings) -> None:
        from service.observe.observer import make_observer

        self.settings = settings
        self.scheduler = Scheduler(settings.batch_interval_ms)
        self.observer = make_observer(settings, heartbeat_source=lambda: self.scheduler.last_tick)
        self.lifecycle: BatchLifecycle | None = None
        self.ctx: StreamingContext | None = None
        self.sc: Any = None
        self._job_zip_dir: tempfile.TemporaryDirectory[str] | None = None
        self.election: Election | None = None
        self.recovered = False
        """Recovery has finished: from now on a failure is one of a running service."""
        self.preloaded: PreloadedCheckpoint | None = None
        """What a warm standby read of the latest checkpoint before it was elected."""

    def run(self) -> int:
        self._install_signal_handlers()
        # Up first, so probes and people see the driver while Spark starts and recovery runs.
        self.observer.start_http()
        try:
            return self._run()
        except FencedOut as error:
            log.critical("fenced out by a newer driver, stopping at once: %s", error)
            return EXIT_FENCED
        except Exception as error:
            if not self.past_start_up():
                raise  # a refusal to start (or a crash of start-up itself)
            log.critical("failed while running, stopping", exc_info=True)
            raise FailedWhileRunning(failure_summary(error)) from error
        finally:
            self.observer.stop_http()
            if self.election is not None:
                self.election.close()
            if self.ctx is not None:
                self.ctx.close()
            if self.sc is not None:
                self.sc.stop()
            if self._job_zip_dir is not None:
                self._job_zip_dir.cleanup()

    def past_start_up(self) -> bool:
        """Whether a batch has begun (a replayed one counts) or recovery has finished."""
        begun = self.lifecycle is not None and self.lifecycle.batches_begun > 0
        return begun or self.recovered

    def _run(self) -> int:
        settings = self.settings
        # Refusals come now, in about a second, not after Spark has started; recovery checks
        # the journal and the graph again under the new epoch.
        journal = self._check_before_start()
        self.sc = self._start_spark()
        spark = settings.spark
        assert self.ctx is not None  # noqa: S101 - built by the checks
        self.ctx.attach_spark(self.sc, spark.stable_placement and not spark.parsed_master.is_local)
        self._log_layout()
        if settings.standby.enabled and not self._await_election(journal):
            return EXIT_OK
        self.observer.phase(RECOVERING)
        epoch = journal.open()
        self.observer.set_epoch(epoch)
        self.lifecycle = self._make_lifecycle(self.ctx, journal, epoch)
        recovered = recover(self.ctx, journal, self.lifecycle, epoch)
        self.recovered = True
        self.ctx.queries.open()
        self.observer.recovered(recovered.seconds, recovered.replayed_batches)
        self.observer.ready_after_first_batch()
        if not self.scheduler.stopping.is_set():
            started = self.scheduler.clock() if recovered.fresh_start else None
            self.scheduler.run(recovered.next_batch_time, self._run_batch, due_since_ms=started)
        journal.close()
        log.info("stopped gracefully")
        return EXIT_OK

    def _log_layout(self) -> None:
        """The task layout, once (`service.graph.layout`); the Kafka outputs' writers with it."""
        assert self.ctx is not None  # noqa: S101 - built by the checks
        ctx = self.ctx
        rule = describe_layout(ctx.auto_layout, ctx.default_partitions, self.sc.defaultParallelism)
        writers = [
            f"{output.name} from the {'driver' if output.writes_on_driver else 'executors'}"
            for output in ctx.outputs
            if output.kafka_needs(ctx.app_id).topics
        ]
        kafka = f"; Kafka outputs write {', '.join(writers)}" if writers else ""
        log.info("task layout: %s%s", rule, kafka)
        if ctx.queries.names:
            # Whether each query of a key pays a job to place it (service.graph.query_jobs).
            placer = "the driver" if driver_hashes_like_workers() else "a Python worker"
            names = ", ".join(ctx.queries.names)
            log.info("queryable states at /state/<name>: %s; %s places keys", names, placer)

    def _check_before_start(self) -> Journal:
        """Every start-up check (`service.driver.preflight`, the steps `dstreams check` runs);
        the first failure raises. Returns the journal, not opened yet."""
        preflight = Preflight(self.settings, self.observer.metrics)
        try:
            run_startup_checks(preflight)
        finally:
            self.ctx = preflight.ctx  # closed by run() whatever happens next
        ctx = preflight.graph
        self.observer.lag_source = ctx.consumer_lag
        self.observer.lost_source = ctx.lost_offsets
        self.observer.stateful_source = ctx.stateful_streams
        ctx.queries.timeout_s = self.settings.http.state_query_timeout_s
        self.observer.state_queries = ctx.queries
        assert preflight.journal is not None  # noqa: S101 - the journal step made it
        return preflight.journal

    def _make_lifecycle(
        self, ctx: StreamingContext, journal: Journal, epoch: int
    ) -> BatchLifecycle:
        """The batch lifecycle, appending under `epoch`, with its outputs set up."""
        from service.driver import wiring

        # The journal's appends also retire sink markers of batches it has forgotten.
        forgetting = ForgettingJournal(journal, ctx.app_id, ctx.outputs)
        journal_log = JournalLog(
            forgetting, epoch, ctx.graph_json(), self.observer.journal_appended
        )
        acknowledge = wiring.make_acknowledger(self.settings, ctx)
        checkpoints = make_checkpoints(self.settings, ctx, journal_log, self.observer)
        if ctx.stateful_streams():
            interval_ms = (
                checkpoint_interval_batches(self.settings) * self.settings.batch_interval_ms
            )
            self.observer.checkpoint_interval(interval_ms / 1000)
        checkpoints.preloaded, self.preloaded = self.preloaded, None
        outages = SinkOutages(self.observer)
        lifecycle = BatchLifecycle(
            ctx, journal_log, self.observer, acknowledge, checkpoints, outages
        )
        lifecycle.setup_outputs()
        return lifecycle

    def _await_election(self, journal: Journal) -> bool:
        """Warm standby: with Spark up and the Python workers started, wait until elected (see
        `service.driver.election`); False if asked to stop first. Opening the journal after this
        fences the previous driver exactly as a cold restart would."""
        started = time.monotonic()
        assert self.ctx is not None  # noqa: S101 - built before Spark starts
        confs = [s.consumer_conf for s in self.ctx.inputs if isinstance(s, KafkaInputDStream)]
        warm_python_workers(self.sc, confs, self.settings.fixed_partitions)
        log.info("standby: Spark and its workers are warm (%.1fs)", time.monotonic() - started)
        self.election = make_election(self.settings, journal)
        preloader = self._start_preloader(journal)
        self.observer.phase(STANDBY)  # before the log line, which tests and people wait for
        log.info("standby: waiting to become the active driver")
        elected = self.election.wait_until_elected(self.scheduler.stopping, self._heartbeat)
        self.preloaded = preloader.take() if preloader is not None else None
        if not elected:
            log.info("standby: stopped before being elected")
            return False
        log.info("standby: elected, taking over from the journal")
        return True

    def _start_preloader(self, journal: Journal) -> StatePreloader | None:
        """Warm state: a stateful graph's standby reads the latest checkpoint while it waits
        (`service.driver.warm_state`); read-only, so it cannot disturb the active driver."""
        assert self.ctx is not None  # noqa: S101 - built before Spark starts
        if not self.ctx.stateful_streams():
            return None
        store = self.settings.checkpoint.store()
        preloader = StatePreloader(self.sc, store, journal)
        preloader.start()
        return preloader

    def _heartbeat(self) -> None:
        """A waiting standby is alive; `/healthz` reads the scheduler's last tick."""
        self.scheduler.last_tick = time.monotonic()

    def _start_spark(self) -> Any:
        """The SparkContext; on a cluster, with the job's code shipped and the executors checked
        (docs/architecture.md, Where it runs)."""
        spark = self.settings.spark
        started = time.monotonic()
        master = spark.parsed_master
        address = driver_address(master, spark.driver_host, spark.bind_address)
        sc = create_spark_context(
            f"dstreams-{self.settings.app_id}",
            spark.master,
            spark.spark_conf(),
            address=address,
            class_archive=spark.class_archive,
            json_logs=logs.writes_json(self.settings.logging.format),
        )
        self.sc = sc  # stopped by run() even if the check below refuses the cluster
        if not master.is_local:
            self._job_zip_dir = tempfile.TemporaryDirectory(prefix="dstreams-job-")
            folder = Path(self._job_zip_dir.name)
            prepare_executors(sc, self.settings.job, spark.ship_job, folder, spark.start_timeout_s)
        log.info(
            "%s (version %s, master %s, driver at %s, class archive %s, %.1fs)",
            SPARK_UP,
            sc.version,
            spark.master,
            address.host,
            describe_archive(spark.class_archive),
            time.monotonic() - started,
        )
        return sc

    def _run_batch(self, batch_time: int, scheduling_delay_s: float) -> None:
        assert self.lifecycle is not None and self.ctx is not None  # noqa: S101 - set in _run
        rate = self.observer.rate_for_next_batch()
        with self.observer.batch_context(batch_time):
            self.lifecycle.run_new(batch_time, scheduling_delay_s, rate)

    def _install_signal_handlers(self) -> None:
        def request_stop(signum: int, _frame: FrameType | None) -> None:
            log.info("signal %d received: finishing the running batch, then stopping", signum)
            self.scheduler.stop()

        signal.signal(signal.SIGTERM, request_stop)
        signal.signal(signal.SIGINT, request_stop)


def make_checkpoints(
    settings: Settings, ctx: StreamingContext, journal: JournalLog, observer: CheckpointObserver
) -> StateCheckpoints:
    """Step 7 and the state half of recovery, from `settings.checkpoint`."""
    store = settings.checkpoint.store()
    ctx.place_state(store.files, Path(settings.checkpoint.local_state_dir).absolute())
    return StateCheckpoints(ctx, store, journal, checkpoint_interval_batches(settings), observer)


def checkpoint_interval_batches(settings: Settings) -> int:
    """Batches between checkpoints: as configured, else about 10 s of them."""
    return settings.checkpoint.interval_batches or default_interval_batches(
        settings.batch_interval_ms
    )


def run_service(settings: Settings) -> int:
    return Service(settings).run()
