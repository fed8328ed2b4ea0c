"""A real Apache Kafka cluster (KRaft mode) on loopback, for tests and the demo.

The broker jars of one pinned release are resolved from Maven Central with `mvn` (see
`devtools/kafka/pom.xml`) once, and the classpath is cached under `~/.cache/dstreams/`. Each cluster
lives in its own directory; every broker is a plain `java -cp ... kafka.Kafka` process that this
module started and stops again by PID.

    with LocalKafkaCluster(brokers=3) as cluster:
        print(cluster.bootstrap_servers)   # 127.0.0.1:41001,127.0.0.1:41003,127.0.0.1:41005
        cluster.kill_broker(0)
        cluster.restart_broker(0)
"""

from __future__ import annotations

import base64
import hashlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, TypeVar

from service.dev.file_lock import exclusive_lock
from service.dev.files import FileIn
from service.dev.kafka_security import ClusterSecurity
from service.dev.leftovers import stop_at_exit, stopped
from service.dev.ports import free_port
from service.dev.processes import LoggedChild, StartedOnEnter
from service.errors import DStreamsError

KAFKA_VERSION = "4.1.1"
POM_PATH = Path(__file__).resolve().parents[2] / "devtools" / "kafka" / "pom.xml"

# A broker needs ~150 MB of heap for test traffic; a small cap keeps three brokers and Spark
# together within a shared laptop or CI runner.
_BROKER_JVM_OPTS = ("-Xmx512m", "-Xms64m", "-XX:+UseSerialGC", "-Djava.awt.headless=true")
# More options for the brokers' JVMs, split on spaces; the tests add `-XX:TieredStopAtLevel=1`
# (a 3-broker cluster starts on about half the CPU), benchmarks and the demo add none.
BROKER_JAVA_OPTIONS_ENV = "DSTREAMS_BROKER_JAVA_OPTIONS"
# The storage tool runs for about a second; the C1 compiler alone starts it fastest.
_TOOL_JVM_OPTS = ("-Xmx256m", "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC")

# Start-up takes ~4 s when the machine is idle; the limit leaves room for a loaded 2-core runner.
START_TIMEOUT_S = 90.0
# SIGTERM gives a controlled shutdown; a combined node that has lost its quorum can wait forever
# for it, so after this grace period the broker is killed.
STOP_GRACE_S = 10.0
_LOG_TAIL_LINES = 40

_LOG4J2_PROPERTIES = """\
# Written by dstreams: every broker logs to stdout, which goes to its broker.log.
status = warn
appender.out.type = Console
appender.out.name = STDOUT
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.out.ref = STDOUT
# The config dump and request logs make a failure harder to find, not easier.
logger.config.name = org.apache.kafka.common.config.AbstractConfig
logger.config.level = WARN
logger.state.name = state.change.logger
logger.state.level = WARN
"""


class KafkaClusterError(DStreamsError):
    """The local Kafka cluster could not be resolved, started or stopped."""


# --- Locating java and the Kafka classpath ----------------------------------------------------


def find_java() -> str:
    """The `java` to run brokers with: `$JAVA_HOME/bin/java`, else `java` on PATH."""
    java_home = os.environ.get("JAVA_HOME")
    if java_home and (Path(java_home) / "bin" / "java").is_file():
        return str(Path(java_home) / "bin" / "java")
    found = shutil.which("java")
    if found is None:
        msg = (
            f"Apache Kafka {KAFKA_VERSION} needs a Java 17+ runtime, but no `java` was found on "
            "PATH or in $JAVA_HOME. Install one (Debian/Ubuntu: `apt-get install "
            "openjdk-17-jre-headless`) or set KAFKA_BOOTSTRAP_SERVERS to use an existing cluster."
        )
        raise KafkaClusterError(msg)
    return found


def cache_dir() -> Path:
    """Where resolved classpaths are kept: `$XDG_CACHE_HOME/dstreams/kafka-<version>/`."""
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "dstreams" / f"kafka-{KAFKA_VERSION}"


def kafka_classpath(pom: Path = POM_PATH) -> list[str]:
    """The jars of the pinned Kafka release, resolved with Maven on first use and then cached.

    The cache file is named after the pom's hash, so editing the pom re-resolves; a cached
    classpath whose jars have gone (e.g. `~/.m2` was cleaned) is resolved again too.
    """
    if not pom.is_file():
        msg = f"expected the Kafka pom at {pom}, found nothing; run from a checkout of dstreams."
        raise KafkaClusterError(msg)
    digest = hashlib.sha256(pom.read_bytes()).hexdigest()[:12]
    cache = cache_dir()
    cached = cache / f"classpath-{digest}.txt"
    # Parallel test sessions share the cache; one resolves while the others wait for its result.
    cache.mkdir(parents=True, exist_ok=True)
    with exclusive_lock(cache / ".lock"):
        jars = _read_cached_classpath(cached)
        if jars is None:
            jars = _resolve_with_maven(pom, cached)
    return jars


def _read_cached_classpath(cached: Path) -> list[str] | None:
    if not cached.is_file():
        return None
    jars = [jar for jar in cached.read_text().strip().split(os.pathsep) if jar]
    if not jars or not all(Path(jar).is_file() for jar in jars):
        return None
    return jars


def _resolve_with_maven(pom: Path, cached: Path) -> list[str]:
    mvn = shutil.which("mvn")
    if mvn is None:
        msg = (
            f"resolving the Apache Kafka {KAFKA_VERSION} jars needs Apache Maven, but no `mvn` "
            "was found on PATH. Install it (Debian/Ubuntu: `apt-get install maven`) or set "
            "KAFKA_BOOTSTRAP_SERVERS to use an existing cluster."
        )
        raise KafkaClusterError(msg)
    partial = cached.with_suffix(f".{os.getpid()}.tmp")
    command = [
        mvn,
        "-q",
        "-B",
        "-f",
        str(pom),
        "dependency:build-classpath",
        f"-Dmdep.outputFile={partial}",
    ]
    result = subprocess.run(command, capture_output=True, text=True, check=False)  # noqa: S603
    if result.returncode != 0 or not partial.is_file():
        output = _tail((result.stdout + result.stderr).splitlines())
        msg = (
            f"expected `{' '.join(command)}` to resolve the Kafka jars, but it exited with "
            f"{result.returncode}. Check that Maven Central (https://repo.maven.apache.org) is "
            f"reachable, or the proxy/mirror in ~/.m2/settings.xml. Maven said:\n{output}"
        )
        raise KafkaClusterError(msg)
    partial.replace(cached)  # atomic: readers see the old file or the complete new one
    jars = _read_cached_classpath(cached)
    if jars is None:
        msg = f"Maven wrote a classpath to {cached} that names missing jars; delete it and retry."
        raise KafkaClusterError(msg)
    return jars


T = TypeVar("T")


def _present(value: T | None, missing: str) -> T:
    """`value`, which a cluster has only once started (and secured): else `missing` is raised."""
    if value is None:
        raise KafkaClusterError(missing)
    return value


# --- Processes --------------------------------------------------------------------------------


def _port_open(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def _tail(lines: list[str], count: int = _LOG_TAIL_LINES) -> str:
    return "\n".join(lines[-count:])


def _log_tail(path: Path) -> str:
    if not path.is_file():
        return "(no log written)"
    lines = path.read_text(errors="replace").splitlines()
    # The first ERROR usually names the cause; the tail may be only its stack trace.
    errors = [line for line in lines if "] ERROR " in line][:3]
    tail = _tail(lines)
    if not errors:
        return tail
    return "First errors:\n" + "\n".join(errors) + "\n...\n" + tail


def new_cluster_id() -> str:
    # Kafka's Uuid text form: 16 random bytes, URL-safe base64 without padding. One id in 64
    # starts with "-", which the storage tool's argument parser reads as an option and then
    # fails with "expected one argument"; Kafka's own generator draws again in that case.
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode("ascii")
        if not text.startswith("-"):
            return text


# --- One broker -------------------------------------------------------------------------------


@dataclass
class _Broker(LoggedChild):
    """One combined broker+controller node: its ports, files and (while running) its process."""

    node_id: int
    port: int
    controller_port: int
    home: Path
    ssl_port: int = 0
    """Mutual-TLS listener of a secured cluster (0: none)."""
    sasl_port: int = 0
    """SASL_SSL (SCRAM-SHA-512) listener of a secured cluster (0: none)."""
    process: subprocess.Popen[bytes] | None = None
    _log: IO[bytes] | None = None

    config_path = FileIn("home", "server.properties")
    log_path = FileIn("home", "broker.log")

    def launch(self, command: list[str]) -> None:
        self.launch_in(self.home, command, env=None)


# --- The cluster ------------------------------------------------------------------------------


class LocalKafkaCluster(StartedOnEnter):
    """A KRaft cluster of 1 or 3 combined broker+controller nodes on 127.0.0.1 free ports.

    One broker: internal topics with replication factor 1. Three brokers: a 3-voter controller
    quorum, default replication factor 3, `min.insync.replicas=2`, and a transaction state log with
    replication factor 3 and minimum ISR 2, so `acks=all` survives one broker and no more.

    `secure=True` adds an SSL (mutual TLS) and a SASL_SSL (SCRAM-SHA-512) listener per broker and
    the StandardAuthorizer; `security` then holds the CA, the users and their credentials
    (see `service.dev.kafka_security`). The PLAINTEXT listener stays, for the brokers themselves
    and for test harnesses, as a super-user port on loopback.
    """

    def __init__(self, brokers: int = 1, workdir: Path | None = None, secure: bool = False) -> None:
        if brokers < 1:
            msg = f"expected at least 1 broker, got {brokers}"
            raise KafkaClusterError(msg)
        self._count = brokers
        self._requested_workdir = workdir
        self._workdir: Path | None = None
        self._owns_workdir = False
        self._brokers: list[_Broker] = []
        self._classpath: list[str] = []
        self._java = ""
        self._secure = secure
        self._security: ClusterSecurity | None = None

    # -- public API --

    @property
    def bootstrap_servers(self) -> str:
        """`host:port` of every broker, comma-separated."""
        if not self._brokers:
            msg = "the cluster has no bootstrap servers yet: call start() first"
            raise KafkaClusterError(msg)
        return ",".join(f"127.0.0.1:{broker.port}" for broker in self._brokers)

    @property
    def ssl_bootstrap_servers(self) -> str:
        """`host:port` of every broker's mutual-TLS listener (a secured cluster only)."""
        return self._secured_listeners("ssl_port")

    @property
    def sasl_ssl_bootstrap_servers(self) -> str:
        """`host:port` of every broker's SASL_SSL listener (a secured cluster only)."""
        return self._secured_listeners("sasl_port")

    @property
    def security(self) -> ClusterSecurity:
        """The CA, users and credentials of a secured cluster."""
        return _present(
            self._security,
            "the cluster is not secured (or not started): LocalKafkaCluster(secure=True)",
        )

    def _secured_listeners(self, port: str) -> str:
        self.security  # noqa: B018 - raises for a cluster that has no such listener
        return ",".join(f"localhost:{getattr(broker, port)}" for broker in self._brokers)

    @property
    def broker_pids(self) -> list[int]:
        """PIDs of the broker processes this cluster started and has not stopped."""
        return [b.process.pid for b in self._brokers if b.process is not None and b.running]

    @property
    def workdir(self) -> Path:
        """The cluster's directory; `broker-<i>/` has `server.properties`, `data/`, `broker.log`."""
        return _present(self._workdir, "the cluster has no directory yet: call start() first")

    def start(self) -> None:
        """Format storage, launch every broker and block until each one serves metadata."""
        if self._brokers:
            msg = "the cluster is already started; call stop() before starting it again"
            raise KafkaClusterError(msg)
        self._java = find_java()
        self._classpath = kafka_classpath()
        self._workdir = self._make_workdir()
        if self._secure:
            self._security = ClusterSecurity(self._workdir / "tls")
            self._security.prepare()
        self._brokers = self._plan_brokers(self._workdir)
        stop_at_exit(self)
        try:
            self._format_storage(new_cluster_id())
            for broker in self._brokers:
                broker.launch(self._broker_command(broker))
            self._wait_until_serving(self._brokers)
        except BaseException:
            self.stop(keep_workdir=True)
            raise

    def stop(self, keep_workdir: bool = False) -> None:
        """Stop the brokers this cluster started, by PID: SIGTERM, then SIGKILL after a grace.

        A cluster whose data is about to be deleted gets no grace: a controlled shutdown only
        protects data, and a quorum stopping all at once spends 5-10 s on it.
        """
        discarding = self._owns_workdir and not keep_workdir
        # All at once: stopped one by one, the last nodes of a quorum wait for each other.
        for broker in self._brokers:
            broker.signal(signal.SIGKILL if discarding else signal.SIGTERM)
        processes = [b.process for b in self._brokers if b.process is not None]
        deadline = time.monotonic() + (0.0 if discarding else STOP_GRACE_S)
        for process in processes:
            try:
                process.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass  # killed just below
        for broker in self._brokers:
            broker.kill()  # SIGKILL whatever outlived the grace period; reap; close the log
        self._brokers = []
        stopped(self)
        if self._owns_workdir and self._workdir is not None and not keep_workdir:
            shutil.rmtree(self._workdir, ignore_errors=True)

    def kill_broker(self, index: int) -> None:
        """SIGKILL broker `index` (0-based) and wait until it is gone; its data dir is kept."""
        self._broker(index).kill()

    def restart_brokers(self, *indexes: int) -> None:
        """Start the killed brokers `indexes` together (a quorum of controllers that are all down
        needs a majority back before any one serves); block until every one serves."""
        brokers = [self._broker(index) for index in indexes]
        for index, broker in zip(indexes, brokers, strict=True):
            if broker.running:
                msg = f"broker {index} is still running; kill_broker({index}) before restarting it"
                raise KafkaClusterError(msg)
            broker.launch(self._broker_command(broker))
        self._wait_until_serving(brokers)

    def revive(self) -> None:
        """Start again every broker that was killed or died; block until they serve."""
        down = [index for index, broker in enumerate(self._brokers) if not broker.running]
        if down:
            self.restart_brokers(*down)

    def restart_broker(self, index: int) -> None:
        """Start broker `index` again on the same ports and data dir; block until it serves."""
        broker = self._broker(index)
        if broker.running:
            msg = f"broker {index} is still running; kill_broker({index}) before restarting it"
            raise KafkaClusterError(msg)
        broker.launch(self._broker_command(broker))
        self._wait_until_serving([broker])

    # -- layout and configuration --

    def _make_workdir(self) -> Path:
        if self._requested_workdir is not None:
            self._requested_workdir.mkdir(parents=True, exist_ok=True)
            self._owns_workdir = False
            return self._requested_workdir
        self._owns_workdir = True
        return Path(tempfile.mkdtemp(prefix=f"dstreams-kafka{self._count}-"))

    def _plan_brokers(self, workdir: Path) -> list[_Broker]:
        (workdir / "log4j2.properties").write_text(_LOG4J2_PROPERTIES)
        secured = self._security is not None
        brokers = [
            _Broker(
                node_id=i + 1,
                port=free_port(),
                controller_port=free_port(),
                home=home,
                ssl_port=free_port() if secured else 0,
                sasl_port=free_port() if secured else 0,
            )
            for i, home in enumerate(workdir / f"broker-{i}" for i in range(self._count))
        ]
        voters = ",".join(f"{b.node_id}@127.0.0.1:{b.controller_port}" for b in brokers)
        for broker in brokers:
            broker.home.mkdir(parents=True, exist_ok=True)
            broker.config_path.write_text(self._server_properties(broker, voters))
        return brokers

    def _server_properties(self, broker: _Broker, voters: str) -> str:
        replication = min(self._count, 3)
        min_isr = 2 if replication >= 3 else 1
        settings = {
            "process.roles": "broker,controller",
            "node.id": broker.node_id,
            "controller.quorum.voters": voters,
            "listeners": (
                f"PLAINTEXT://127.0.0.1:{broker.port},CONTROLLER://127.0.0.1:{broker.controller_port}"
            ),
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{broker.port}",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "log.dirs": broker.home / "data",
            "num.partitions": 1,
            "default.replication.factor": replication,
            "min.insync.replicas": min_isr,
            "offsets.topic.replication.factor": replication,
            # Fewer internal partitions: the first consumer group and transaction start faster.
            "offsets.topic.num.partitions": 10,
            "transaction.state.log.replication.factor": replication,
            "transaction.state.log.min.isr": min_isr,
            "transaction.state.log.num.partitions": 10,
            "share.coordinator.state.topic.replication.factor": replication,
            "share.coordinator.state.topic.min.isr": min_isr,
            # Tests join groups one at a time; the 3 s default delay would only slow them.
            "group.initial.rebalance.delay.ms": 0,
            # A killed broker is fenced (and leaves the ISRs) after this, rather than after 9 s, so
            # failover tests stay short; the heartbeat must stay well under the session timeout.
            "broker.heartbeat.interval.ms": 500,
            "broker.session.timeout.ms": 4000,
            # Lets a warm standby (standby.session_timeout_ms) notice a killed driver sooner than
            # the 6 s default minimum allows.
            "group.min.session.timeout.ms": 1000,
        }
        if self._security is not None:
            settings.update(self._secured_listener_settings(broker))
        lines = [f"{key}={value}" for key, value in settings.items()]
        return "# Generated by dstreams (service/dev/kafka_cluster.py)\n" + "\n".join(lines) + "\n"

    def _secured_listener_settings(self, broker: _Broker) -> dict[str, object]:
        # Clients reach the secured listeners as `localhost`, a name the broker certificate holds.
        plain = f"PLAINTEXT://127.0.0.1:{broker.port}"
        ssl = f"SSL://localhost:{broker.ssl_port}"
        sasl = f"SASL_SSL://localhost:{broker.sasl_port}"
        controller = f"CONTROLLER://127.0.0.1:{broker.controller_port}"
        return {
            "listeners": f"{plain},{ssl},{sasl},{controller}",
            "advertised.listeners": f"{plain},{ssl},{sasl}",
            "listener.security.protocol.map": (
                "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_SSL:SASL_SSL,CONTROLLER:PLAINTEXT"
            ),
            **self.security.broker_settings(),
        }

    def _java_command(self, jvm_opts: tuple[str, ...], main: str, *args: str) -> list[str]:
        log4j = f"-Dlog4j2.configurationFile={self.workdir / 'log4j2.properties'}"
        classpath = os.pathsep.join(self._classpath)
        return [self._java, *jvm_opts, log4j, "-cp", classpath, main, *args]

    def _broker_command(self, broker: _Broker) -> list[str]:
        extra = tuple(os.environ.get(BROKER_JAVA_OPTIONS_ENV, "").split())
        return self._java_command(
            (*_BROKER_JVM_OPTS, *extra), "kafka.Kafka", str(broker.config_path)
        )

    # -- start-up steps --

    def _format_storage(self, cluster_id: str) -> None:
        # The brokers' storage tools run in parallel: each is a short JVM, mostly start-up time.
        tools = []
        for broker in self._brokers:
            command = self._java_command(
                _TOOL_JVM_OPTS,
                "kafka.tools.StorageTool",
                "format",
                "--cluster-id",
                cluster_id,
                "--config",
                str(broker.config_path),
                *(self._security.format_arguments() if self._security is not None else []),
            )
            log = broker.home / "format.log"
            with log.open("wb") as out:
                tool = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)  # noqa: S603
            tools.append((tool, log))
        for tool, log in tools:
            if tool.wait() != 0:
                msg = (
                    f"expected the Kafka storage tool to format {log.parent / 'data'}, but it "
                    f"exited with {tool.returncode}. Its output ({log}):\n{_log_tail(log)}"
                )
                raise KafkaClusterError(msg)

    def _wait_until_serving(self, brokers: list[_Broker]) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        for broker in brokers:
            self._wait_for_port(broker, deadline)
        self._wait_for_metadata(brokers, deadline)

    def _wait_for_port(self, broker: _Broker, deadline: float) -> None:
        while not _port_open(broker.port):
            self._check_alive(broker)
            if time.monotonic() > deadline:
                self._fail_start(broker, f"port {broker.port} did not open")
            time.sleep(0.1)

    def _wait_for_metadata(self, brokers: list[_Broker], deadline: float) -> None:
        from connectors.kafka_client import new_admin_client

        # Every node must be registered and unfenced: only then does it lead partitions and
        # count towards replication factors when topics are created.
        wanted = {b.node_id for b in self._brokers if b.running}
        for broker in brokers:
            admin = new_admin_client({"bootstrap.servers": f"127.0.0.1:{broker.port}"})
            while True:
                self._check_alive(broker)
                seen = self._brokers_seen(admin)
                if wanted <= seen:
                    break
                if time.monotonic() > deadline:
                    found = ", ".join(map(str, sorted(seen))) or "none"
                    wanted_text = ", ".join(map(str, sorted(wanted)))
                    self._fail_start(
                        broker, f"metadata lists brokers [{found}], expected [{wanted_text}]"
                    )
                time.sleep(0.2)

    @staticmethod
    def _brokers_seen(admin: Any) -> set[int]:
        from confluent_kafka import KafkaException

        try:
            metadata = admin.list_topics(timeout=2)
        except KafkaException:
            return set()
        return set(metadata.brokers)

    def _check_alive(self, broker: _Broker) -> None:
        if broker.process is not None and broker.process.poll() is not None:
            code = broker.process.returncode
            self._fail_start(broker, f"the broker process exited with code {code}")

    def _fail_start(self, broker: _Broker, found: str) -> None:
        msg = (
            f"expected Kafka broker {broker.node_id - 1} (node {broker.node_id}) to serve metadata "
            f"on 127.0.0.1:{broker.port} within {START_TIMEOUT_S:.0f} s, but {found}. "
            f"The cluster's files are kept in {self.workdir}. Last lines of {broker.log_path}:\n"
            f"{_log_tail(broker.log_path)}"
        )
        raise KafkaClusterError(msg)

    def _broker(self, index: int) -> _Broker:
        if not 0 <= index < len(self._brokers):
            msg = f"expected a broker index in [0, {len(self._brokers)}), got {index}"
            raise KafkaClusterError(msg)
        return self._brokers[index]
