"""PySpark's own Structured Streaming word count (Kafka source and sink), for the benchmarks.

The `spark-sql-kafka-0-10` connector is not part of the pyspark wheel. It is resolved from Maven
Central with `mvn dependency:build-classpath` (as the local Kafka's jars are) for the installed
pyspark version, or, when that exact release is not published there, the newest earlier patch
release of the same minor version; the classpath is cached under
`$XDG_CACHE_HOME/dstreams/spark-sql-kafka-<version>/`. Only the jars pyspark lacks are added.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

POM = """<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>dstreams.bench</groupId>
  <artifactId>spark-sql-kafka-classpath</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency>
      <groupId>org.apache.spark</groupId>
      <artifactId>spark-sql-kafka-0-10_2.13</artifactId>
      <version>{version}</version>
    </dependency>
  </dependencies>
</project>
"""


def _cache(version: str) -> Path:
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "dstreams" / f"spark-sql-kafka-{version}" / "classpath.txt"


def _resolve(version: str) -> list[str] | None:
    cached = _cache(version)
    if cached.is_file():
        jars = [jar for jar in cached.read_text().split(os.pathsep) if jar]
        if jars and all(Path(jar).is_file() for jar in jars):
            return jars
    mvn = shutil.which("mvn")
    if mvn is None:
        msg = "resolving spark-sql-kafka-0-10 needs Apache Maven (`apt-get install maven`)"
        raise RuntimeError(msg)
    with tempfile.TemporaryDirectory() as tmp:
        pom = Path(tmp) / "pom.xml"
        pom.write_text(POM.format(version=version))
        out = Path(tmp) / "classpath.txt"
        command = [mvn, "-q", "-B", "-f", str(pom), "dependency:build-classpath",
                   "-DincludeScope=runtime", f"-Dmdep.outputFile={out}"]  # fmt: skip
        result = subprocess.run(command, capture_output=True, text=True, check=False)  # noqa: S603
        if result.returncode != 0 or not out.is_file():
            return None
        cached.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(out, cached)
        return [jar for jar in out.read_text().split(os.pathsep) if jar]


def connector_jars() -> tuple[str, list[str]]:
    """(connector version, the jars pyspark lacks) for the installed pyspark."""
    import pyspark

    major, minor, patch = (int(part) for part in pyspark.__version__.split(".")[:3])
    bundled = {jar.rsplit("-", 1)[0] for jar in os.listdir(Path(pyspark.__file__).parent / "jars")}
    for candidate in range(patch, -1, -1):
        version = f"{major}.{minor}.{candidate}"
        jars = _resolve(version)
        if jars is not None:
            return version, [j for j in jars if Path(j).name.rsplit("-", 1)[0] not in bundled]
    msg = f"no spark-sql-kafka-0-10_2.13 {major}.{minor}.x found on Maven Central"
    raise RuntimeError(msg)


def word_count(bootstrap: str, topic: str, lines: int, batch_lines: int, partitions: int) -> float:
    """Runs the Structured Streaming word count over `topic` (1 s trigger, running counts in
    update mode to a Kafka topic, at-least-once) until it has read `lines`; returns its steady
    records/s (after its first micro-batch), from Spark's own progress reports."""
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as f

    version, jars = connector_jars()
    print(f"structured streaming: spark-sql-kafka-0-10 {version}", flush=True)
    spark = (
        SparkSession.builder.master("local[2]")
        .appName("structured-streaming-bench")
        .config("spark.jars", ",".join(jars))
        .config("spark.sql.shuffle.partitions", str(partitions))
        .config("spark.ui.enabled", "false")
        .getOrCreate()
    )
    try:
        return _run_query(spark, f, bootstrap, topic, lines, batch_lines)
    finally:
        spark.stop()


def _run_query(spark: Any, f: Any, bootstrap: str, topic: str, lines: int, batch: int) -> float:
    source = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", str(batch))
        .load()
    )
    words = source.select(
        f.explode(f.split(f.lower(f.col("value").cast("string")), " ")).alias("key")
    )
    counts = (
        words.groupBy("key").count().select("key", f.col("count").cast("string").alias("value"))
    )
    with tempfile.TemporaryDirectory() as checkpoint:
        query = (
            counts.writeStream.format("kafka")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("topic", f"{topic}-structured")
            .option("checkpointLocation", checkpoint)
            .outputMode("update")
            .trigger(processingTime="1 second")
            .start()
        )
        ends: list[tuple[int, float]] = []
        seen = 0
        deadline = time.monotonic() + 600
        while seen < lines and time.monotonic() < deadline:
            time.sleep(0.5)
            progress = [p for p in query.recentProgress if p["numInputRows"]]
            seen = sum(p["numInputRows"] for p in progress)
            ends = [(p["numInputRows"], _end(p)) for p in progress]
        query.stop()
    return sum(n for n, _ in ends[1:]) / (ends[-1][1] - ends[0][1])


def _end(progress: dict[str, Any]) -> float:
    from datetime import datetime

    started = datetime.fromisoformat(progress["timestamp"].replace("Z", "+00:00")).timestamp()
    return started + progress["durationMs"]["triggerExecution"] / 1000


def main() -> int:
    """`python bench/structured_streaming.py BOOTSTRAP TOPIC LINES BATCH_LINES PARTITIONS`:
    prints `records/s <steady rate>` last. A process of its own, because Spark puts `spark.jars`
    on the driver's classpath only when it starts the JVM."""
    import sys

    bootstrap, topic, lines, batch, partitions = sys.argv[1:6]
    rate = word_count(bootstrap, topic, int(lines), int(batch), int(partitions))
    print(f"records/s {rate}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
