"""The dstreams image, run the way the Helm chart runs it, against the Testcontainers Kafka.

As in helm/dstreams/templates/deployment.yaml: UID 10001, a read-only root filesystem with all
capabilities dropped, scratch at /tmp, the state volume at /var/lib/dstreams, the config file
mounted read-only at /etc/dstreams/config.yaml, `run --config ...` as arguments, SPARK_LOCAL_DIRS
and HOME on the scratch, and a DSTREAMS_* variable layered over the file (the broker address).
The container reaches the broker over the engine's bridge; the test reaches the container's HTTP
port and the broker through loopback ports the engine publishes.

One run of the word-count job: ready and serving metrics, SIGKILLed mid-stream, started again on
the same volume (it recovers in a new epoch), drained, stopped with SIGTERM (exit 0), and then the
Kafka sink holds exactly the expected counts, each batch's markers once.

And what the image holds: exactly the distributions requirements.lock pins, at their versions
(what "the same dependencies on every rebuild" comes to), and no development tooling
(service/dev), and `dstreams dev` there says so.
"""

from __future__ import annotations

import importlib.util
import io
import json
import tarfile
import time
import urllib.request
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from service import testing
from service.dev.brokers import create_topic
from service.dev.docker_engine import docker_client
from service.graph.functions import words_of
from service.journal.base import JournalState
from service.journal.file import FileJournal
from tests.chaos.conftest import (
    assert_markers_once,
    assert_no_open_transactions,
    assert_same_totals,
    read_topic,
)

PARTITIONS = 3
LINES_PER_PARTITION = 200
RATE_PER_PARTITION = 40  # lines per 1 s batch: the input spans five batches or more
OUTPUT_PARTITIONS = 2
VOCABULARY = [f"word{i:02d}" for i in range(40)]
UID = 10001
HTTP_PORT = 8080
# Spark's JVM and the recovery start in 10-20 s on an idle 2-core machine; these bound a hang.
READY_TIMEOUT_S = 240.0
DRAIN_TIMEOUT_S = 240.0
# The chart's terminationGracePeriodSeconds: SIGTERM, then SIGKILL after this long.
GRACE_S = 120


@dataclass
class App:
    """The word-count app of this test: its topics, config file, volume and expected counts."""

    app_id: str
    input_topic: str
    output_topic: str
    config_dir: Path
    volume: str
    expected: Counter[str]
    lines: int


@pytest.fixture
def app(kafka_on_docker: Any, docker_engine: Any, tmp_path: Path) -> Iterator[App]:
    app_id = f"wc-image-{uuid.uuid4().hex[:8]}"
    topic = create_topic(kafka_on_docker.bootstrap, f"{app_id}.lines", PARTITIONS)
    lines = testing.produce_lines(
        kafka_on_docker.bootstrap, topic, PARTITIONS, LINES_PER_PARTITION, VOCABULARY, seed=11
    )
    expected = Counter(w for part in lines.values() for line in part for w in words_of(line))
    config_dir = tmp_path / "config"
    config_dir.mkdir()
    (config_dir / "config.yaml").write_text(yaml.safe_dump(job_config(app_id, topic)))
    # The container's user reads the mounted file, as it reads the chart's ConfigMap.
    config_dir.chmod(0o755)
    (config_dir / "config.yaml").chmod(0o644)
    client = docker_client(docker_engine.docker_host)
    volume = client.volumes.create(f"{app_id}-state")
    try:
        yield App(
            app_id,
            topic,
            f"{app_id}.counts",
            config_dir,
            volume.name,
            expected,
            sum(expected.values()),
        )
    finally:
        volume.remove(force=True)
        client.close()


def job_config(app_id: str, topic: str) -> dict[str, Any]:
    """The chart's `config` values for this job (config/wordcount.yaml with the chart's paths)."""
    return {
        "app_id": app_id,
        "job": "examples.wordcount:build",
        "batch_interval_ms": 1000,
        "default_partitions": OUTPUT_PARTITIONS,
        "spark": {"master": "local[2]"},
        # A placeholder: the DSTREAMS_KAFKA__BOOTSTRAP_SERVERS variable must win over it.
        "kafka": {"bootstrap_servers": "kafka.invalid:9092", "require_replication": False},
        "sources": {
            "lines": {
                "topics": [topic],
                "starting_offsets": "earliest",
                "codec": "utf-8",
                "max_rate_per_partition": RATE_PER_PARTITION,
            }
        },
        "sinks": {"counts": {"type": "kafka", "topic": f"{app_id}.counts"}},
        "journal": {"type": "file", "path": "/var/lib/dstreams/journal"},
        "checkpoint": {"path": "/var/lib/dstreams/checkpoints"},
        "http": {"port": HTTP_PORT},
        "logging": {"format": "json"},
    }


class Driver:
    """One container of the app, started as the chart's Deployment starts its pod."""

    def __init__(self, client: Any, image: str, app: App, network_bootstrap: str) -> None:
        self.container = client.containers.run(
            image,
            ["run", "--config", "/etc/dstreams/config.yaml"],
            detach=True,
            name=f"{app.app_id}-{uuid.uuid4().hex[:6]}",
            user=f"{UID}:{UID}",
            read_only=True,
            cap_drop=["ALL"],
            security_opt=["no-new-privileges"],
            tmpfs={"/tmp": "rw,nosuid,nodev,size=2g,mode=1777"},
            volumes={
                app.volume: {"bind": "/var/lib/dstreams", "mode": "rw"},
                str(app.config_dir): {"bind": "/etc/dstreams", "mode": "ro"},
            },
            environment={
                "SPARK_LOCAL_DIRS": "/tmp/spark-local",
                "HOME": "/tmp",
                "DSTREAMS_KAFKA__BOOTSTRAP_SERVERS": network_bootstrap,
            },
            ports={f"{HTTP_PORT}/tcp": ("127.0.0.1", None)},
            mem_limit="3g",
        )
        self.started = time.monotonic()
        self.container.reload()
        host_port = self.container.ports[f"{HTTP_PORT}/tcp"][0]["HostPort"]
        self.url = f"http://127.0.0.1:{host_port}"

    def get(self, path: str) -> tuple[int, bytes]:
        """(status, body) of GET `path`; (0, b"") while nothing answers."""
        try:
            with urllib.request.urlopen(self.url + path, timeout=5) as reply:  # noqa: S310
                return int(reply.status), bytes(reply.read())
        except urllib.error.HTTPError as error:
            return int(error.code), bytes(error.read())
        except OSError:
            return 0, b""

    def status(self) -> dict[str, Any]:
        code, body = self.get("/status")
        return dict(json.loads(body)) if code == 200 else {}

    def wait_until(self, what: str, timeout_s: float, check: Any) -> None:
        deadline = time.monotonic() + timeout_s
        while not check():
            self.container.reload()
            if self.container.status not in ("created", "running"):
                pytest.fail(f"the container exited before {what}:\n{self.logs()}")
            if time.monotonic() > deadline:
                pytest.fail(f"timed out after {timeout_s:.0f}s waiting for {what}:\n{self.logs()}")
            time.sleep(0.25)

    def wait_ready(self) -> float:
        """Seconds from `docker run` to /readyz answering 200."""
        self.wait_until("/readyz", READY_TIMEOUT_S, lambda: self.get("/readyz")[0] == 200)
        return time.monotonic() - self.started

    def exit_code(self) -> int:
        return int(self.container.wait(timeout=GRACE_S + 30)["StatusCode"])

    def logs(self) -> str:
        return str(self.container.logs(tail=60).decode(errors="replace"))


def journal_state(container: Any, tmp_path: Path) -> JournalState:
    """The journal on the state volume, copied out of the (stopped) container."""
    stream, _ = container.get_archive("/var/lib/dstreams/journal")
    with tarfile.open(fileobj=io.BytesIO(b"".join(stream))) as archive:
        archive.extractall(tmp_path / "journal-copy", filter="data")
    return JournalState.from_records(FileJournal(tmp_path / "journal-copy" / "journal").read())


def output_totals(bootstrap: str, topic: str) -> Counter[str]:
    totals: Counter[str] = Counter()
    for message in read_topic(bootstrap, topic):
        totals[message.key().decode()] += int(message.value())
    return totals


@pytest.mark.timeout(900)
def test_image_runs_like_the_chart_and_survives_sigkill_with_exact_output(
    dstreams_image: str, app: App, kafka_on_docker: Any, docker_engine: Any, tmp_path: Path
) -> None:
    client = docker_client(docker_engine.docker_host)
    drivers: list[Driver] = []
    try:
        first = Driver(client, dstreams_image, app, kafka_on_docker.network_bootstrap)
        drivers.append(first)
        ready_s = first.wait_ready()
        print(f"image {dstreams_image}: start to ready {ready_s:.1f}s")
        # Built into the image for its own JVM and pyspark, and found by spark.class_archive: auto.
        assert "class archive /opt/dstreams/class-archive/spark-" in first.logs(), first.logs()
        code, metrics = first.get("/metrics")
        assert code == 200
        assert b"# TYPE dstreams_" in metrics, metrics[:500]
        assert first.status()["epoch"] == 1

        # Mid-stream: batches completed, input left. The rate limit spreads the input over five
        # batches or more, so the kill lands while lines are still unread.
        first.wait_until("two completed batches", READY_TIMEOUT_S, lambda: _completed(first) >= 2)
        read_before_kill = first.status()["totals"]["records_in"]
        first.container.kill()  # SIGKILL, as `docker kill` sends it
        assert first.exit_code() == 137
        assert read_before_kill < PARTITIONS * LINES_PER_PARTITION

        second = Driver(client, dstreams_image, app, kafka_on_docker.network_bootstrap)
        drivers.append(second)
        second.wait_ready()
        assert second.status()["epoch"] == 2, "the journal on the volume must carry over"
        second.wait_until(
            "every word counted",
            DRAIN_TIMEOUT_S,
            lambda: (
                sum(output_totals(kafka_on_docker.bootstrap, app.output_topic).values())
                >= app.lines
            ),
        )
        second.container.stop(timeout=GRACE_S)  # SIGTERM, then SIGKILL after the grace period
        assert second.exit_code() == 0, second.logs()

        state = journal_state(second.container, tmp_path)
        state.validate()
        assert not state.pending()
        batches = {
            t
            for t, record in state.planned.items()
            if t in state.completed and any(r.count for r in record.ranges)
        }
        totals = output_totals(kafka_on_docker.bootstrap, app.output_topic)
        assert_same_totals("Kafka", totals, app.expected)
        markers = Counter(
            (int(m["batch_time"]), int(m["partition"]))
            for m in (
                json.loads(message.value())
                for message in read_topic(
                    kafka_on_docker.bootstrap, f"dstreams.markers.{app.app_id}.counts"
                )
            )
        )
        assert_markers_once("Kafka marker topic", markers, batches, OUTPUT_PARTITIONS)
        assert_no_open_transactions(kafka_on_docker.bootstrap, app.output_topic)
    finally:
        for driver in drivers:
            driver.container.remove(force=True)
        client.close()


def _completed(driver: Driver) -> int:
    return int(driver.status().get("totals", {}).get("completed", 0))


# --- What the image holds ----------------------------------------------------------------------

REPO_ROOT = Path(__file__).resolve().parents[2]
# Runs in the image: whether service.dev can be found, and every installed distribution.
INSPECT = """
import importlib.metadata, importlib.util, json, pathlib, sysconfig
print(json.dumps({
    "dev_importable": importlib.util.find_spec("service.dev") is not None,
    "dev_files": [str(p) for p in pathlib.Path(sysconfig.get_path("purelib"), "service", "dev")
                  .glob("**/*")],
    "distributions": [[d.metadata["Name"], d.version] for d in importlib.metadata.distributions()],
}))
"""


def lock_script() -> ModuleType:
    """devtools/lock_dependencies.py, which reads the lock files as the image build does."""
    path = REPO_ROOT / "devtools" / "lock_dependencies.py"
    spec = importlib.util.spec_from_file_location("lock_dependencies", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_once(
    client: Any, image: str, command: list[str], entrypoint: list[str] | None = None
) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of one short container of `image`, with no network."""
    container = client.containers.run(
        image,
        command,
        entrypoint=entrypoint,
        detach=True,
        user=f"{UID}:{UID}",
        read_only=True,
        network_mode="none",
        environment={"HOME": "/tmp"},
    )
    try:
        code = int(container.wait(timeout=120)["StatusCode"])
        out = container.logs(stdout=True, stderr=False).decode(errors="replace")
        err = container.logs(stdout=False, stderr=True).decode(errors="replace")
        return code, out, err
    finally:
        container.remove(force=True)


def test_the_image_holds_the_locked_versions_and_no_development_tooling(
    dstreams_image: str, docker_engine: Any
) -> None:
    locking = lock_script()
    pins = locking.read_pins(locking.RUNTIME_LOCK)
    client = docker_client(docker_engine.docker_host)
    try:
        code, out, err = run_once(client, dstreams_image, ["-c", INSPECT], ["python"])
        assert code == 0, err
        found = json.loads(out)
        assert found["dev_importable"] is False
        assert found["dev_files"] == []
        installed = {locking.normalize(name): version for name, version in found["distributions"]}
        assert installed.pop("kafka-dstreams") == "0.1.0"
        # Exactly requirements.lock: the build tools of requirements-build.lock left the venv.
        assert installed == pins, "the image's distributions must be exactly the locked ones"
        assert not installed.keys() & locking.read_pins(locking.BUILD_LOCK).keys()

        code, out, err = run_once(client, dstreams_image, ["dev", "kafka"])
        assert code == 1, (out, err)
        assert "`dstreams dev` needs the development tooling" in err, err
        assert "Traceback" not in err, err
    finally:
        client.close()
