"""The two JVM runs of `service.driver.class_archive.build`, each in a process of its own:
`python -m service.driver.class_archive_runs train|check ARCHIVE`.

`train` starts Spark in a JVM that writes the archive of every class it loaded when it exits,
runs jobs of the shapes a batch runs, and waits for that JVM to exit; `check` starts Spark with
the archive and `-Xshare:on`, under which the JVM refuses to start with an archive it cannot use.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from service.driver.class_archive import BUILD_TIMEOUT_S, QUIET, ClassArchiveError
from service.driver.spark import LOG4J2_FILE, create_spark_context


def train(archive: Path) -> None:
    """Starts Spark in a JVM that archives its classes at exit, runs jobs of the shapes a batch
    runs, then ends the JVM and waits for it to write the archive."""
    sc = _spark(f"-XX:ArchiveClassesAtExit={archive} {QUIET}")
    _typical_jobs(sc)
    _stop_and_wait_for_jvm(sc)


def check(archive: Path) -> None:
    """Starts Spark with the archive, refusing to start without it, and runs a job."""
    sc = _spark(f"-XX:SharedArchiveFile={archive} -Xshare:on {QUIET}")
    _typical_jobs(sc)
    _stop_and_wait_for_jvm(sc)


def _spark(options: str) -> Any:
    if LOG4J2_FILE.exists():
        options = f"-Dlog4j.configurationFile=file:{LOG4J2_FILE} {options}"
    extra = {"spark.driver.extraJavaOptions": options}
    return create_spark_context("dstreams-class-archive", "local[2]", extra, class_archive=None)


def _typical_jobs(sc: Any) -> None:
    from pyspark import StorageLevel

    from service.graph.functions import add, pair_with_one

    words = sc.parallelize([f"w{i % 97}" for i in range(20_000)], 4)
    counts = words.map(pair_with_one).reduceByKey(add, 4)
    kept = counts.partitionBy(4).persist(StorageLevel.MEMORY_AND_DISK)
    both = sc.union([kept, counts.partitionBy(4)]).mapPartitions(iter)
    both.collect()
    kept.count()
    kept.unpersist()


def _stop_and_wait_for_jvm(sc: Any) -> None:
    from pyspark import SparkContext

    # pyspark keeps its JVM until this process exits; the archive is written only as the JVM
    # exits, which it does when its standard input (held by pyspark) closes.
    gateway = SparkContext._gateway  # noqa: SLF001 - pyspark's JVM launcher; no public handle
    process = getattr(gateway, "proc", None)
    sc.stop()
    if process is None:
        msg = "pyspark did not launch the JVM itself; cannot wait for it to write the archive"
        raise ClassArchiveError(msg)
    gateway.shutdown()
    if process.stdin is not None:
        process.stdin.close()
    process.wait(timeout=BUILD_TIMEOUT_S)


def main(argv: list[str]) -> int:
    step, archive = argv
    {"train": train, "check": check}[step](Path(archive))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
