"""`dstreams executor`: the image's entry point when Spark on Kubernetes starts an executor pod.

Spark's Kubernetes scheduler starts every executor pod from the driver's image with the single
argument `executor` and the executor's settings in environment variables (`SPARK_DRIVER_URL`,
`SPARK_EXECUTOR_ID`, ...; Spark's own images answer them with a shell script). Our image's entry
point is `dstreams`, so this command builds the same Java command line from those variables and
replaces itself with it: the JVM keeps the process (and tini stays PID 1), its Python workers run
the image's interpreter with dstreams and the job installed, as on the driver.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
from collections.abc import Mapping
from pathlib import Path

import click

EXECUTOR_BACKEND = "org.apache.spark.scheduler.cluster.k8s.KubernetesExecutorBackend"
# (argument, variable) pairs Spark's scheduler sets on every executor pod.
_ARGUMENTS = (
    ("--driver-url", "SPARK_DRIVER_URL"),
    ("--executor-id", "SPARK_EXECUTOR_ID"),
    ("--cores", "SPARK_EXECUTOR_CORES"),
    ("--app-id", "SPARK_APPLICATION_ID"),
    ("--hostname", "SPARK_EXECUTOR_POD_IP"),
    ("--resourceProfileId", "SPARK_RESOURCE_PROFILE_ID"),
    ("--podName", "SPARK_EXECUTOR_POD_NAME"),
)
_JAVA_OPTION = re.compile(r"SPARK_JAVA_OPT_(\d+)")


class ExecutorEnvironmentError(click.ClickException):
    """The pod lacks a variable Spark's scheduler sets: not started by Spark."""


def executor_command(environ: Mapping[str, str], spark_home: Path, java: str) -> list[str]:
    """The executor JVM's command line, as Spark's own image entry point builds it."""
    missing = [name for _, name in _ARGUMENTS if not environ.get(name)]
    missing += [] if environ.get("SPARK_EXECUTOR_MEMORY") else ["SPARK_EXECUTOR_MEMORY"]
    if missing:
        msg = (
            f"expected the variables Spark sets on an executor pod, but {', '.join(missing)} "
            "are missing; `dstreams executor` is for Spark on Kubernetes to start, not people"
        )
        raise ExecutorEnvironmentError(msg)
    # Spark passes the executor's Java options (its module options included) numbered.
    numbered = sorted(
        (int(match.group(1)), value)
        for name, value in environ.items()
        if (match := _JAVA_OPTION.fullmatch(name))
    )
    memory = environ["SPARK_EXECUTOR_MEMORY"]
    classpath = [entry for entry in environ.get("SPARK_CLASSPATH", "").split(":") if entry]
    arguments = [part for flag, name in _ARGUMENTS for part in (flag, environ[name])]
    return [
        java,
        *(value for _, value in numbered),
        f"-Xms{memory}",
        f"-Xmx{memory}",
        "-cp",
        ":".join([*classpath, str(spark_home / "jars" / "*")]),
        EXECUTOR_BACKEND,
        *arguments,
    ]


def pyspark_home() -> Path:
    spec = importlib.util.find_spec("pyspark")
    if spec is None or not spec.submodule_search_locations:
        msg = "expected pyspark to be installed in the image, found none"
        raise click.ClickException(msg)
    return Path(next(iter(spec.submodule_search_locations)))


@click.command(hidden=True)
def executor() -> None:
    """Start a Spark executor (Spark on Kubernetes runs this in executor pods)."""
    java_home = os.environ.get("JAVA_HOME")
    java = str(Path(java_home) / "bin" / "java") if java_home else shutil.which("java")
    if java is None:
        msg = "expected a Java runtime (JAVA_HOME or java on PATH), found none"
        raise click.ClickException(msg)
    command = executor_command(os.environ, pyspark_home(), java)
    os.execv(command[0], command)  # noqa: S606 - the executor JVM replaces this process
