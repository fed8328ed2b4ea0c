"""Creates the SparkContext the engine runs on, with the settings determinism depends on."""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Mapping
from typing import Any

from service.config.paths import shipped_config_file

HASH_SEED = "0"
LOG4J2_FILE = shipped_config_file("log4j2.properties")

# Settings every dstreams job needs; user settings may add to these but not weaken determinism.
BASE_CONF: dict[str, str] = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    # Python workers are reused so each keeps its Kafka consumer and producers across batches.
    "spark.python.worker.reuse": "true",
    # pyspark's daemon with two per-task costs removed; see service/spark_daemon.py.
    "spark.python.daemon.module": "service.driver.spark_daemon",
    # A Kafka-fed RDD has no locality; waiting for it only adds latency.
    "spark.locality.wait": "0",
    # Output partition p of batch t must be the same on every replay: fixed string hashing.
    "spark.executorEnv.PYTHONHASHSEED": HASH_SEED,
    "spark.sql.shuffle.partitions": "4",
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.driver.host": "127.0.0.1",
}


def with_task_retries(master: str) -> str:
    """`local[N]` retries no failed task; `local[N,4]` retries like a cluster (4 attempts), so a
    dead Python worker costs a task retry, not the batch."""
    match = re.fullmatch(r"local\[(\d+|\*)\]", master.strip())
    return f"local[{match.group(1)},4]" if match else master


def create_spark_context(
    app_name: str, master: str = "local[2]", extra_conf: Mapping[str, str] | None = None
) -> Any:
    """Start (or return the running) SparkContext with dstreams' base settings."""
    os.environ["PYTHONHASHSEED"] = HASH_SEED
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    # Workers must run the driver's interpreter, or they lack the driver's packages.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark import SparkConf, SparkContext

    conf = SparkConf().setAppName(app_name).setMaster(with_task_retries(master))
    for key, value in {**BASE_CONF, **(extra_conf or {})}.items():
        conf.set(key, value)
    if LOG4J2_FILE.exists():
        option = f"-Dlog4j.configurationFile=file:{LOG4J2_FILE}"
        conf.set("spark.driver.extraJavaOptions", option)
        conf.set("spark.executor.extraJavaOptions", option)
    sc = SparkContext.getOrCreate(conf)
    sc.setLogLevel("WARN")
    return sc
