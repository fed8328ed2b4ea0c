"""What decides an image rebuild, the names the images get, and what goes into a build context.

No engine runs in this tier: the content hash, the Kafka image name against Testcontainers'
own version check, the context files and tar, and the Kafka image's `configure` script run by
`sh` against a temp file.
"""

from __future__ import annotations

import io
import os
import re
import subprocess
import tarfile
from pathlib import Path

import pytest

from service.dev.images import (
    DEFAULT_MIRROR,
    KAFKA_IMAGE_DIR,
    Bases,
    ImageBuilder,
    ImageBuildError,
    base_image_name,
    bases_from,
    content_hash,
    dockerignore_context,
    ensure_wheelhouse,
    kafka_image_name,
    write_context,
)
from service.dev.kafka_cluster import KAFKA_VERSION


def files(tmp_path: Path, **contents: str) -> dict[str, Path]:
    context = {}
    for name, text in contents.items():
        path = tmp_path / name
        path.write_text(text)
        context[name] = path
    return context


def test_the_same_content_hashes_the_same_and_any_change_rebuilds(tmp_path: Path) -> None:
    context = files(tmp_path, Dockerfile="FROM base\n", script="echo hi\n")
    digest = content_hash(context, {"BASE_IMAGE": "a"})
    assert digest == content_hash(dict(reversed(context.items())), {"BASE_IMAGE": "a"})
    assert digest != content_hash(context, {"BASE_IMAGE": "b"}), "a build argument"
    assert digest != content_hash(context, {"BASE_IMAGE": "a"}, ["base id 2"]), "the base"
    (tmp_path / "script").chmod(0o755)
    assert digest != content_hash(context, {"BASE_IMAGE": "a"}), "an executable bit"
    (tmp_path / "script").chmod(0o644)
    (tmp_path / "script").write_text("echo bye\n")
    assert digest != content_hash(context, {"BASE_IMAGE": "a"}), "a file's bytes"


def test_released_artifacts_count_by_name_and_size(tmp_path: Path) -> None:
    # Versioned wheels and jars never change under their name; reading them all would be slow.
    jar = files(tmp_path, **{"kafka-clients-4.1.1.jar": "12345"})
    digest = content_hash(jar, {})
    (tmp_path / "kafka-clients-4.1.1.jar").write_text("54321")
    assert content_hash(jar, {}) == digest
    (tmp_path / "kafka-clients-4.1.1.jar").write_text("123456")
    assert content_hash(jar, {}) != digest


def test_the_kafka_image_name_passes_testcontainers_kraft_check() -> None:
    # with_kraft() reads the tag as a Confluent Platform version with this comparison (it needs
    # an engine to construct the container, so the comparison is applied here directly).
    from testcontainers.community.kafka import KafkaContainer
    from testcontainers.core.version import ComparableVersion

    name = kafka_image_name("0123456789abcdef" * 4)
    assert name == f"dstreams-local/kafka-{KAFKA_VERSION}-0123456789ab:8.1"
    assert ComparableVersion(name.split(":")[-1]) >= KafkaContainer.MIN_KRAFT_TAG


def test_bases_are_local_unless_public_is_named() -> None:
    assert bases_from({}) == "local"
    assert bases_from({"DSTREAMS_IMAGE_BASES": " Public "}) == "public"
    with pytest.raises(ImageBuildError, match="'remote' names no bases: use local"):
        bases_from({"DSTREAMS_IMAGE_BASES": "remote"})


def test_the_dstreams_context_follows_dockerignore() -> None:
    names = set(dockerignore_context())
    assert {"Dockerfile", "pyproject.toml", "README.md", "service/cli/main.py"} <= names
    assert "examples/wordcount.py" in names
    assert not [n for n in names if n.startswith(("tests/", ".venv/", ".git/", "helm/"))]
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]


def test_the_context_tar_is_owned_by_root_and_keeps_executable_scripts(tmp_path: Path) -> None:
    context = {
        "docker/launch": KAFKA_IMAGE_DIR / "docker" / "launch",
        "config/log4j2.properties": KAFKA_IMAGE_DIR / "config" / "log4j2.properties",
    }
    archive = io.BytesIO()
    write_context(archive, context)
    archive.seek(0)
    with tarfile.open(fileobj=archive) as tar:
        members = {m.name: m for m in tar.getmembers()}
    assert set(members) == set(context)
    assert all(m.uid == 0 and m.gid == 0 and m.uname == "" for m in members.values())
    assert members["docker/launch"].mode & 0o111
    assert not members["config/log4j2.properties"].mode & 0o111


def run_configure(tmp_path: Path, environ: dict[str, str]) -> str:
    """The image's `configure`, writing to a temp file instead of /etc/kafka/kafka.properties."""
    script = (KAFKA_IMAGE_DIR / "docker" / "configure").read_text()
    target = tmp_path / "kafka.properties"
    (tmp_path / "configure").write_text(script.replace("/etc/kafka/kafka.properties", str(target)))
    env = {"PATH": os.environ["PATH"], **environ}
    subprocess.run(["sh", str(tmp_path / "configure")], env=env, check=True)
    return target.read_text()


def test_configure_writes_broker_settings_from_kafka_variables(tmp_path: Path) -> None:
    written = run_configure(
        tmp_path,
        {
            "KAFKA_PROCESS_ROLES": "broker,controller",
            "KAFKA_ADVERTISED_LISTENERS": "PLAINTEXT://127.0.0.1:32768,BROKER://172.17.0.2:9092",
            "KAFKA_LISTENER_NAME_BROKER_SASL__MECHANISM": "x",
            "KAFKA_SOME___DASHED": "y",
            "KAFKA_HEAP_OPTS": "-Xmx1g",
            "CLUSTER_ID": "MkU3OEVBNTcwNTJENDM2Qk",
            "KAFKA_SASL_JAAS_CONFIG": "a=b==",
        },
    )
    assert written.splitlines() == [
        "advertised.listeners=PLAINTEXT://127.0.0.1:32768,BROKER://172.17.0.2:9092",
        "listener.name.broker.sasl_mechanism=x",
        "log.dirs=/var/lib/kafka/data",
        "process.roles=broker,controller",
        "sasl.jaas.config=a=b==",
        "some-dashed=y",
    ]


def test_configure_survives_the_edits_the_testcontainers_script_makes() -> None:
    # The script deletes lines naming KAFKA_ZOOKEEPER_CONNECT (sed) and appends a command line.
    script = (KAFKA_IMAGE_DIR / "docker" / "configure").read_text()
    assert "KAFKA_ZOOKEEPER_CONNECT" not in script
    assert script.endswith("\n")
    assert not re.search(r"^\s*exit\b", script, re.MULTILINE)


# --- What is sent to the engine, per kind of base ---------------------------------------------


class FakeImage:
    def __init__(self, client: FakeClient, image_id: str) -> None:
        self.client, self.id = client, image_id

    def tag(self, repository: str, tag: str) -> None:
        self.client.tags[f"{repository}:{tag}"] = self.id


class FakeClient:
    """The few docker-py calls the builder makes, recorded; builds succeed at once."""

    def __init__(self, tags: dict[str, str]) -> None:
        self.tags = dict(tags)
        self.builds: list[dict[str, object]] = []
        self.images = self
        self.api = self

    def get(self, tag: str) -> FakeImage:
        from service.dev.docker_engine import docker_sdk

        if tag not in self.tags:
            raise docker_sdk().errors.ImageNotFound(tag)
        return FakeImage(self, self.tags[tag])

    def build(self, fileobj: io.BufferedIOBase, **options: object) -> list[dict[str, str]]:
        with tarfile.open(fileobj=fileobj) as tar:
            options["files"] = sorted(tar.getnames())
        self.builds.append(options)
        self.tags[str(options["tag"])] = f"sha256:{len(self.builds)}"
        return [{"stream": "Successfully built\n"}]

    def list(self, filters: dict[str, str]) -> list[FakeImage]:
        return []

    def prune(self, filters: dict[str, object]) -> None:
        self.builds.append({"pruned": filters})


@pytest.fixture
def fake_jars(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    jar = tmp_path / f"kafka_2.13-{KAFKA_VERSION}.jar"
    jar.write_bytes(b"jar")
    monkeypatch.setattr("service.dev.images.kafka_classpath", lambda: [str(jar)])


def builder(client: FakeClient, bases: Bases, tmp_path: Path, prune: bool = False) -> ImageBuilder:
    return ImageBuilder(client, bases, tmp_path / "cache", lambda line: None, prune)


def test_public_bases_build_from_the_dockerfile_defaults_with_network(
    tmp_path: Path, fake_jars: None
) -> None:
    client = FakeClient({})
    image = builder(client, "public", tmp_path)
    name = image.kafka_image()
    tag = image.dstreams_image()
    kafka, dstreams = client.builds
    assert kafka["tag"] == name
    assert kafka["buildargs"] == {"KAFKA_VERSION": KAFKA_VERSION}, "no BASE_IMAGE: the default"
    assert kafka["network_mode"] is None
    assert {"Dockerfile", "docker/configure", f"libs/kafka_2.13-{KAFKA_VERSION}.jar"} <= set(
        kafka["files"]
    )
    assert dstreams["buildargs"] == {}, "python:3.11-slim-bookworm, pip from PyPI"
    assert dstreams["network_mode"] is None
    assert not [f for f in dstreams["files"] if f.startswith("wheelhouse/")]
    assert client.tags["dstreams:0.1.0"] == client.tags[tag]


def test_local_bases_build_on_the_local_base_with_no_network(
    tmp_path: Path, fake_jars: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("DSTREAMS_DEBIAN_MIRROR", raising=False)
    base, _ = base_image_name(DEFAULT_MIRROR)
    client = FakeClient({base: "sha256:base"})
    image = builder(client, "local", tmp_path, prune=True)
    image.kafka_image()
    kafka, pruned = client.builds
    assert kafka["buildargs"] == {"KAFKA_VERSION": KAFKA_VERSION, "BASE_IMAGE": base}
    assert kafka["network_mode"] == "none"
    assert pruned == {"pruned": {"dangling": True}}, "the private engine drops the leftovers"


def test_sdists_count_by_name_and_size_like_wheels(tmp_path: Path) -> None:
    # pyspark is published as an sdist only: the offline build context carries the locked one.
    sdist = files(tmp_path, **{"pyspark-4.1.4.tar.gz": "12345"})
    digest = content_hash(sdist, {})
    (tmp_path / "pyspark-4.1.4.tar.gz").write_text("54321")
    assert content_hash(sdist, {}) == digest
    (tmp_path / "pyspark-4.1.4.tar.gz").write_text("123456")
    assert content_hash(sdist, {}) != digest


def test_the_wheelhouse_holds_the_locked_files_fetched_once_per_lock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    downloads: list[list[str]] = []

    def download(locks: list[Path], wheelhouse: Path) -> None:
        # Stands in for pip download --require-hashes: what it would leave, and the marker.
        downloads.append([lock.read_text() for lock in locks])
        wheelhouse.mkdir(parents=True)
        for name in ("click-8.5.1-py3-none-any.whl", "pyspark-4.1.4.tar.gz", ".complete"):
            (wheelhouse / name).write_text(name)

    monkeypatch.setattr("service.dev.images._download_locked", download)
    lock = tmp_path / "requirements.lock"
    lock.write_text("click==8.5.1 \\\n    --hash=sha256:" + "a" * 64 + "\n")
    cache = tmp_path / "cache"
    first = ensure_wheelhouse(cache, [lock])
    assert [path.name for path in first] == [
        "click-8.5.1-py3-none-any.whl",
        "pyspark-4.1.4.tar.gz",
    ]
    assert ensure_wheelhouse(cache, [lock]) == first
    assert len(downloads) == 1, "the same locks reuse the files"
    lock.write_text("click==8.5.2 \\\n    --hash=sha256:" + "b" * 64 + "\n")
    assert ensure_wheelhouse(cache, [lock])[0].parent != first[0].parent
    assert len(downloads) == 2, "a relock fetches again"
