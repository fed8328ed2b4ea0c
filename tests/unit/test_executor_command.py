"""`dstreams executor`: the Java command an executor pod runs, built from what Spark sets."""

from __future__ import annotations

from pathlib import Path

import pytest

from service.cli.executor import (
    EXECUTOR_BACKEND,
    ExecutorEnvironmentError,
    executor_command,
)

POD_ENV = {
    "SPARK_DRIVER_URL": "spark://CoarseGrainedScheduler@demo-dstreams-driver.streams.svc:7078",
    "SPARK_EXECUTOR_ID": "3",
    "SPARK_EXECUTOR_CORES": "1",
    "SPARK_APPLICATION_ID": "spark-application-1",
    "SPARK_EXECUTOR_POD_IP": "10.1.2.3",
    "SPARK_RESOURCE_PROFILE_ID": "0",
    "SPARK_EXECUTOR_POD_NAME": "demo-dstreams-exec-3",
    "SPARK_EXECUTOR_MEMORY": "1g",
    "SPARK_JAVA_OPT_10": "-Dlast=1",
    "SPARK_JAVA_OPT_2": "--add-opens=java.base/java.lang=ALL-UNNAMED",
    "SPARK_JAVA_OPT_0": "-XX:+IgnoreUnrecognizedVMOptions",
    "SPARK_CLASSPATH": "/opt/extra/*",
}


def test_the_command_is_the_executor_backend_with_sparks_arguments() -> None:
    command = executor_command(POD_ENV, Path("/opt/venv/pyspark"), "/usr/bin/java")
    backend = command.index(EXECUTOR_BACKEND)
    assert command[0] == "/usr/bin/java"
    # Java options in Spark's numbering, then the heap, then the classpath.
    assert command[1:4] == [
        "-XX:+IgnoreUnrecognizedVMOptions",
        "--add-opens=java.base/java.lang=ALL-UNNAMED",
        "-Dlast=1",
    ]
    assert command[4:6] == ["-Xms1g", "-Xmx1g"]
    assert command[6:8] == ["-cp", "/opt/extra/*:/opt/venv/pyspark/jars/*"]
    arguments = dict(zip(command[backend + 1 :: 2], command[backend + 2 :: 2], strict=True))
    assert arguments == {
        "--driver-url": POD_ENV["SPARK_DRIVER_URL"],
        "--executor-id": "3",
        "--cores": "1",
        "--app-id": "spark-application-1",
        "--hostname": "10.1.2.3",
        "--resourceProfileId": "0",
        "--podName": "demo-dstreams-exec-3",
    }


def test_outside_an_executor_pod_it_names_what_is_missing() -> None:
    environ = {k: v for k, v in POD_ENV.items() if k != "SPARK_DRIVER_URL"}
    with pytest.raises(ExecutorEnvironmentError, match="SPARK_DRIVER_URL"):
        executor_command(environ, Path("/x"), "java")
