"""Creates the SparkContext the engine runs on, with the settings determinism depends on.

Any master works: `local[N]` runs every task inside the driver's JVM, on loopback; a cluster
(`spark://`, `k8s://`, `yarn`) runs them on executors, which connect back to the driver at an
address they can reach (see `driver_address`; docs/architecture.md, Where it runs).
"""

from __future__ import annotations

import gc
import os
import re
import socket
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from service.config.masters import SparkMaster, parse_master
from service.config.paths import shipped_config_file
from service.driver import class_archive as jvm_archive
from service.errors import ConfigError
from service.graph.key_placement import HASH_SEED

LOG4J2_FILE = shipped_config_file("log4j2.properties")
# The same loggers with Spark's JSON layout, for `logging.format` json (docs/architecture.md,
# Observability): one log format per process, so a collector never meets a text line.
LOG4J2_JSON_FILE = shipped_config_file("log4j2-json.properties")
# The scheduler pools, among them live state queries' (see `spark.scheduler.mode` below).
POOLS_FILE = shipped_config_file("fairscheduler.xml")
LOOPBACK = "127.0.0.1"

# Settings every dstreams job needs; user settings may add to these but not weaken determinism.
BASE_CONF: dict[str, str] = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    # Python workers are reused so each keeps its Kafka consumer and producers across batches.
    "spark.python.worker.reuse": "true",
    # pyspark's daemon with two per-task costs removed; see service/spark_daemon.py.
    "spark.python.daemon.module": "service.driver.spark_daemon",
    # The JVM talks to its Python workers, and collects results into the driver, over Unix
    # sockets rather than loopback TCP. Over TCP each task paid ~20 ms of small writes waiting
    # for acknowledgements: a trivial 4-task job on 2 cores took 0.15 s, over Unix sockets
    # 0.06 s, and the latency bench's 20k-line word count job 0.24 s against 0.13 s. The
    # sockets live in java.io.tmpdir (/tmp, writable in the image and the chart's pod).
    "spark.python.unix.domain.socket.enabled": "true",
    # A Kafka-fed RDD has no locality; waiting for it only adds latency.
    "spark.locality.wait": "0",
    # Except for an output partition's own executor (see service/graph/placement.py): moving a
    # Kafka sink's task costs a producer initialization (0.1-1 s), more than this wait.
    "spark.locality.wait.process": "1s",
    # Output partition p of batch t must be the same on every replay: fixed string hashing.
    "spark.executorEnv.PYTHONHASHSEED": HASH_SEED,
    "spark.sql.shuffle.partitions": "4",
    # Pools, so that a live state query's one-task job takes the next free core instead of
    # waiting behind every queued task of a batch (service/graph/query_jobs.py). The engine's own
    # jobs all stay in the default pool, which runs them first in, first out, as before.
    "spark.scheduler.mode": "FAIR",
}


@dataclass(frozen=True)
class DriverAddress:
    """Where executors reach the driver (`host`) and where it listens (`bind`)."""

    host: str
    bind: str

    def spark_conf(self) -> dict[str, str]:
        return {"spark.driver.host": self.host, "spark.driver.bindAddress": self.bind}


def driver_address(
    master: SparkMaster, host: str | None = None, bind: str | None = None
) -> DriverAddress:
    """Loopback in local mode; on a cluster, `host` (else the route towards the master) and
    `bind` (else `host`)."""
    if master.is_local:
        return DriverAddress(LOOPBACK, LOOPBACK)
    chosen = host or route_towards(master)
    return DriverAddress(chosen, bind or chosen)


def route_towards(master: SparkMaster) -> str:
    """This host's address on its route to the master (no packet is sent: a UDP `connect` only
    picks the interface). YARN names no master address; there, the host name's address."""
    try:
        if not master.endpoints:
            return socket.gethostbyname(socket.gethostname())
        host, port = master.endpoints[0]
        family, kind, proto, _, target = socket.getaddrinfo(host, port, type=socket.SOCK_DGRAM)[0]
        with socket.socket(family, kind, proto) as probe:
            probe.connect(target)
            return str(probe.getsockname()[0])
    except OSError as error:
        msg = (
            f"expected to find this host's address towards the Spark master {master.url!r}, "
            f"found none ({error}); set spark.driver_host to an address the executors can "
            "reach (in a pod: DSTREAMS_SPARK__DRIVER_HOST from status.podIP)"
        )
        raise ConfigError(msg) from error


def with_task_retries(master: str) -> str:
    """`local[N]` retries no failed task; `local[N,4]` retries like a cluster (4 attempts), so a
    dead Python worker costs a task retry, not the batch."""
    match = re.fullmatch(r"local\[(\d+|\*)\]", master.strip())
    return f"local[{match.group(1)},4]" if match else master


def spark_conf(
    master: SparkMaster,
    address: DriverAddress,
    extra_conf: Mapping[str, str] | None = None,
    archive: Path | None = None,
    *,
    json_logs: bool = False,
) -> dict[str, str]:
    """Every Spark property dstreams sets: the base, the driver's address, then the user's.
    `archive`: the driver JVM's class-data archive (`service.driver.class_archive`), if any;
    `json_logs`: the JVMs log JSON lines rather than text."""
    conf = {**BASE_CONF, **address.spark_conf()}
    driver_options = [jvm_archive.java_options(archive)]
    log4j_file = LOG4J2_JSON_FILE if json_logs else LOG4J2_FILE
    if log4j_file.exists():
        option = f"-Dlog4j.configurationFile=file:{log4j_file}"
        driver_options.insert(0, option)
        if master.on_this_host:  # elsewhere the file's path means nothing
            conf["spark.executor.extraJavaOptions"] = option
    if any(driver_options):
        conf["spark.driver.extraJavaOptions"] = " ".join(o for o in driver_options if o)
    if POOLS_FILE.exists():  # read by the driver only
        conf["spark.scheduler.allocation.file"] = f"file:{POOLS_FILE}"
    return {**conf, **(extra_conf or {})}


def create_spark_context(
    app_name: str,
    master: str = "local[2]",
    extra_conf: Mapping[str, str] | None = None,
    *,
    address: DriverAddress | None = None,
    class_archive: str | Path | None = "auto",
    json_logs: bool = False,
) -> Any:
    """Start (or return the running) SparkContext with dstreams' base settings.

    `address` defaults to `driver_address(master)`: loopback in local mode, the route towards
    the master on a cluster. `class_archive`: see `class_archive.resolve`. `json_logs`: the
    driver's and local executors' JVMs log JSON lines (Spark's structured layout).
    """
    parsed = parse_master(master)
    address = address or driver_address(parsed)
    os.environ["PYTHONHASHSEED"] = HASH_SEED
    if parsed.is_local:
        os.environ.setdefault("SPARK_LOCAL_IP", LOOPBACK)
    elif os.environ.get("SPARK_LOCAL_IP", "").startswith("127."):
        # Inherited from a setup made for local mode, it would hide the driver from executors;
        # spark.driver.host and bindAddress say where the driver is.
        del os.environ["SPARK_LOCAL_IP"]
    # Workers must run the driver's interpreter, or they lack the driver's packages.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark import SparkConf, SparkContext

    conf = SparkConf().setAppName(app_name).setMaster(with_task_retries(master))
    archive = jvm_archive.resolve(class_archive)
    for key, value in spark_conf(parsed, address, extra_conf, archive, json_logs=json_logs).items():
        conf.set(key, value)
    sc = SparkContext.getOrCreate(conf)
    sc.setLogLevel("WARN")
    freeze_long_lived_objects()
    return sc


def freeze_long_lived_objects() -> None:
    """Moves every object the driver holds now (modules, pyspark, py4j, the job's graph) out of
    the garbage collector's view. A full collection then walks only what batches allocate: in
    the latency bench's driver, full collections every second or so took 17-135 ms each while
    they walked everything, a spike in the batch they fell into. pyspark's workers do the same
    (`service.driver.spark_daemon`)."""
    gc.freeze()
