"""The container images the tests use, built on this machine and cached by a hash of their content.

Three images, each built only when no image with its content hash exists in the engine:

- **base** (local bases only): Debian bookworm from Debian's packages with debootstrap
  (devtools/images/debian-rootfs.sh), holding Python 3.11, a Java 17 JRE and tini, imported with
  `docker import`. It stands in for the public bases where no image registry is reachable.
- **kafka**: Apache Kafka 4.1.1 from the jars the project resolves from Maven Central, laid out so
  that Testcontainers' `KafkaContainer` runs it unchanged (devtools/images/kafka/Dockerfile).
- **dstreams**: the project's own `Dockerfile`.

`DSTREAMS_IMAGE_BASES` picks the bases. `local` (the default) builds on the base above with no
network inside the build: the Python dependencies come in the build context as exactly the files
the lock files name (requirements.lock, requirements-build.lock), downloaded on this machine with
their hashes checked, and the base already holds the Debian packages. `public` builds the same
Dockerfiles from their usual public bases (python:3.11-slim-bookworm, debian:bookworm-slim), for a
machine that can pull them, such as a CI runner.

    python -m service.dev.images dstreams     # what `make image` runs
"""

from __future__ import annotations

import argparse
import hashlib
import os
import platform
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Literal

from service import __version__
from service.dev.docker_engine import (
    DockerEngine,
    docker_client,
    docker_engine,
    docker_sdk,
    engine_environment,
)
from service.dev.file_lock import exclusive_lock
from service.dev.kafka_cluster import KAFKA_VERSION, kafka_classpath
from service.errors import DStreamsError

Bases = Literal["local", "public"]
BASES_ENV = "DSTREAMS_IMAGE_BASES"
MIRROR_ENV = "DSTREAMS_DEBIAN_MIRROR"

REPO_ROOT = Path(__file__).resolve().parents[2]
IMAGES_DIR = REPO_ROOT / "devtools" / "images"
KAFKA_IMAGE_DIR = IMAGES_DIR / "kafka"
ROOTFS_SCRIPT = IMAGES_DIR / "debian-rootfs.sh"

DEBIAN_SUITE = "bookworm"
DEFAULT_MIRROR = "http://deb.debian.org/debian"
# What the project's images take from their base: python3 and python3-venv for the dstreams
# builder stage, the JRE for Spark and Kafka, tini for the dstreams entry point, hostname for the
# Testcontainers start script. The Dockerfiles install any of these a base lacks.
BASE_PACKAGES = ("python3", "python3-venv", "openjdk-17-jre-headless", "tini", "hostname")
# The Python of the local base; the wheels in the build context are made for it.
BASE_PYTHON = (3, 11)

# testcontainers-python reads the image tag as a Confluent Platform version and refuses KRaft
# below 7.0. Confluent Platform 8.1 ships Apache Kafka 4.1, so the tag says 8.1; the repository
# name carries the real Kafka version and the content hash.
CONFLUENT_LINE_OF_KAFKA = {"4.1": "8.1"}

LABEL_KIND = "dev.dstreams.image"
LABEL_HASH = "dev.dstreams.content-hash"
# Images of one kind kept in the engine, newest first: two worktrees at different commits each
# find theirs, without every edit leaving a gigabyte behind.
KEEP_PER_KIND = 2
BUILD_TIMEOUT_S = 1800


class ImageBuildError(DStreamsError):
    """An image could not be built or imported."""


def bases_from(environ: Mapping[str, str]) -> Bases:
    """The bases `DSTREAMS_IMAGE_BASES` names: `local` unless it says `public`."""
    value = environ.get(BASES_ENV, "").strip().lower() or "local"
    if value not in ("local", "public"):
        msg = f"{BASES_ENV}={value!r} names no bases: use local (the default) or public"
        raise ImageBuildError(msg)
    return "public" if value == "public" else "local"


def cache_dir(environ: Mapping[str, str] = os.environ) -> Path:
    base = Path(environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "dstreams" / "images"


# --- Content hashes ---------------------------------------------------------------------------

# Archive name in the build context -> file on this machine.
Context = dict[str, Path]


def content_hash(context: Context, buildargs: Mapping[str, str], salt: Sequence[str] = ()) -> str:
    """A hash of everything an image is built from: its files, its build arguments and `salt`.

    Files are hashed by content, except wheels, sdists and jars: their names carry a version, and
    a released version never changes, so name and size stand for the bytes (hashing half a
    gigabyte of them on every run would cost more than the check is worth; pip checks the locked
    distributions' hashes itself, when it downloads them and again in the build).
    """
    digest = hashlib.sha256()
    for name in sorted(context):
        path = context[name]
        mode = path.stat().st_mode & 0o111
        if name.endswith((".whl", ".tar.gz", ".jar")):
            fingerprint = f"{path.name}:{path.stat().st_size}"
        else:
            fingerprint = hashlib.sha256(path.read_bytes()).hexdigest()
        digest.update(f"file {name} {mode:o} {fingerprint}\n".encode())
    for name in sorted(buildargs):
        digest.update(f"arg {name}={buildargs[name]}\n".encode())
    for item in salt:
        digest.update(f"salt {item}\n".encode())
    return digest.hexdigest()


def kafka_image_name(digest: str, kafka_version: str = KAFKA_VERSION) -> str:
    """`dstreams-local/kafka-<version>-<hash>:<Confluent line>`, a tag KafkaContainer accepts."""
    line = CONFLUENT_LINE_OF_KAFKA[".".join(kafka_version.split(".")[:2])]
    return f"dstreams-local/kafka-{kafka_version}-{digest[:12]}:{line}"


def base_image_name(mirror: str) -> tuple[str, str]:
    """The local base's tag and content hash: from its script, suite, mirror and packages."""
    salt = [DEBIAN_SUITE, mirror, *BASE_PACKAGES]
    digest = content_hash({"debian-rootfs.sh": ROOTFS_SCRIPT}, {}, salt)
    return f"dstreams-local/debian:{DEBIAN_SUITE}-{digest[:12]}", digest


def dockerignore_context(root: Path = REPO_ROOT) -> Context:
    """The files `docker build` would send from `root`, following its .dockerignore."""
    exclude_paths = docker_sdk().utils.build.exclude_paths
    patterns = [
        line.strip()
        for line in (root / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    ]
    names = exclude_paths(str(root), patterns, dockerfile="Dockerfile")
    return {
        name: root / name
        for name in sorted(names)
        if (root / name).is_file() and not (root / name).is_symlink()
    }


# --- Building ---------------------------------------------------------------------------------


@dataclass
class ImageBuilder:
    """Builds (or finds) the images in one engine. `log` receives one line per step.

    `prune_dangling`: after a build, remove every untagged image (the builder stage and the
    layers only it used) — right for the private engine, which only this tooling uses; a
    developer's own engine is left to its owner.
    """

    client: Any  # docker.DockerClient; docker-py ships no type information
    bases: Bases
    cache: Path
    log: Callable[[str], None]
    prune_dangling: bool = False

    @classmethod
    def for_engine(
        cls, client: Any, engine: DockerEngine, log: Callable[[str], None]
    ) -> ImageBuilder:
        """A builder for `engine` with the bases DSTREAMS_IMAGE_BASES names."""
        return cls(client, bases_from(os.environ), cache_dir(), log, engine.private)

    def base_image(self) -> str | None:
        """The local base's tag, built on first use; None with public bases."""
        if self.bases == "public":
            return None
        mirror = os.environ.get(MIRROR_ENV, "").strip() or DEFAULT_MIRROR
        tag, digest = base_image_name(mirror)
        with self._locked("base"):
            if not self._exists(tag):
                self._import_rootfs(tag, digest, mirror)
        return tag

    def kafka_image(self) -> str:
        """The Kafka image's name, built when no image has its content hash."""
        base = self.base_image()
        context: Context = {
            str(path.relative_to(KAFKA_IMAGE_DIR)): path
            for path in sorted(KAFKA_IMAGE_DIR.rglob("*"))
            if path.is_file()
        }
        context.update({f"libs/{Path(jar).name}": Path(jar) for jar in kafka_classpath()})
        buildargs = {"KAFKA_VERSION": KAFKA_VERSION}
        if base is not None:
            buildargs["BASE_IMAGE"] = base
        digest = content_hash(context, buildargs, self._base_salt(base))
        tag = kafka_image_name(digest)
        with self._locked("kafka"):
            if not self._exists(tag):
                self._build("kafka", context, buildargs, digest, [tag])
        return tag

    def dstreams_image(self) -> str:
        """The dstreams image's content tag; `dstreams:<version>` names the same image."""
        base = self.base_image()
        context = dockerignore_context()
        buildargs: dict[str, str] = {}
        if base is not None:
            context.update(
                {f"wheelhouse/{dist.name}": dist for dist in ensure_wheelhouse(self.cache)}
            )
            buildargs = {"PYTHON_IMAGE": base, "PIP_NO_INDEX": "1"}
        digest = content_hash(context, buildargs, self._base_salt(base))
        tag = f"dstreams:content-{digest[:12]}"
        with self._locked("dstreams"):
            if not self._exists(tag):
                self._build("dstreams", context, buildargs, digest, [tag])
            self.client.images.get(tag).tag("dstreams", __version__)
        return tag

    # -- steps --

    def _base_salt(self, base: str | None) -> list[str]:
        # A rebuilt base (same tag, new content) must rebuild what stands on it: its ID counts.
        return [] if base is None else [str(self.client.images.get(base).id)]

    def _exists(self, tag: str) -> bool:
        try:
            self.client.images.get(tag)
        except docker_sdk().errors.ImageNotFound:
            return False
        self.log(f"image {tag}: cached")
        return True

    def _import_rootfs(self, tag: str, digest: str, mirror: str) -> None:
        self.log(f"image {tag}: debootstrap {DEBIAN_SUITE} from {mirror}")
        started = time.monotonic()
        self.cache.mkdir(parents=True, exist_ok=True)
        tarball = self.cache / f"rootfs-{digest[:12]}.tar"
        command = ["bash", str(ROOTFS_SCRIPT), str(tarball), DEBIAN_SUITE, mirror, *BASE_PACKAGES]
        result = subprocess.run(command, capture_output=True, text=True, check=False)  # noqa: S603
        if result.returncode != 0:
            msg = (
                f"expected {ROOTFS_SCRIPT.name} to build the {DEBIAN_SUITE} root filesystem, but "
                f"it exited with {result.returncode}:\n{result.stderr[-3000:]}\nIt needs root, "
                f"debootstrap and Debian's mirror ({MIRROR_ENV} names another); or set "
                f"{BASES_ENV}=public where public images can be pulled."
            )
            raise ImageBuildError(msg)
        repository, _, version = tag.partition(":")
        changes = [
            f"LABEL {LABEL_KIND}=base {LABEL_HASH}={digest}",
            "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8",
            'CMD ["/bin/bash"]',
        ]
        try:
            self.client.api.import_image_from_file(
                str(tarball), repository=repository, tag=version, changes=changes
            )
        finally:
            tarball.unlink(missing_ok=True)
        self.log(f"image {tag}: built in {time.monotonic() - started:.0f}s")
        self._prune("base")

    def _build(
        self,
        kind: str,
        context: Context,
        buildargs: Mapping[str, str],
        digest: str,
        tags: list[str],
    ) -> None:
        self.log(f"image {tags[0]}: building ({self.bases} bases)")
        started = time.monotonic()
        with tempfile.TemporaryFile(dir=self.cache if self.cache.is_dir() else None) as archive:
            write_context(archive, context)
            archive.seek(0)
            output = self.client.api.build(
                fileobj=archive,
                custom_context=True,
                tag=tags[0],
                buildargs=dict(buildargs),
                labels={LABEL_KIND: kind, LABEL_HASH: digest},
                # Local bases hold everything the build needs, so it runs with no network at all:
                # it cannot reach any address beyond this machine, even by mistake.
                network_mode="none" if self.bases == "local" else None,
                rm=True,
                forcerm=True,
                decode=True,
                timeout=BUILD_TIMEOUT_S,
            )
            _follow_build(output, tags[0])
        self.log(f"image {tags[0]}: built in {time.monotonic() - started:.0f}s")
        self._prune(kind)

    def _prune(self, kind: str) -> None:
        images = self.client.images.list(filters={"label": f"{LABEL_KIND}={kind}"})
        images.sort(key=lambda image: str(image.attrs.get("Created", "")), reverse=True)
        for image in images[KEEP_PER_KIND:]:
            try:
                self.client.images.remove(image.id, force=True)
            except docker_sdk().errors.APIError as error:  # in use by a container: keep it
                self.log(f"kept superseded image {image.short_id}: {error.explanation}")
        if self.prune_dangling:
            self.client.images.prune(filters={"dangling": True})

    def _locked(self, kind: str) -> AbstractContextManager[None]:
        return _locked(self.cache, kind)


@contextmanager
def _locked(cache: Path, name: str) -> Iterator[None]:
    # Two sessions needing the same image or wheels: one makes it, the other waits and finds it.
    cache.mkdir(parents=True, exist_ok=True)
    with exclusive_lock(cache / f"{name}.lock"):
        yield


def write_context(archive: IO[bytes], context: Context) -> None:
    """The build context as a tar: owned by root, modes kept (scripts stay executable)."""

    def normalize(info: tarfile.TarInfo) -> tarfile.TarInfo:
        info.uid = info.gid = 0
        info.uname = info.gname = ""
        return info

    with tarfile.open(fileobj=archive, mode="w") as tar:
        for name in sorted(context):
            tar.add(str(context[name]), arcname=name, recursive=False, filter=normalize)


def _follow_build(output: Iterator[dict[str, Any]], tag: str) -> None:
    lines: list[str] = []
    for chunk in output:
        if "stream" in chunk:
            lines.extend(str(chunk["stream"]).rstrip("\n").splitlines())
        if "error" in chunk:
            tail = "\n".join(lines[-40:])
            msg = (
                f"expected the build of {tag} to succeed, but it failed: {chunk['error']}\n"
                f"The build said:\n{tail}"
            )
            raise ImageBuildError(msg)


# --- The locked distributions for the offline build -------------------------------------------

# devtools/lock_dependencies.py writes them; the Dockerfile installs from them with their hashes.
LOCK_FILES = (REPO_ROOT / "requirements-build.lock", REPO_ROOT / "requirements.lock")
# What pip download leaves: wheels, and sdists for what is published only so (pyspark).
DISTRIBUTION_SUFFIXES = (".whl", ".tar.gz")


def ensure_wheelhouse(cache: Path, locks: Sequence[Path] = LOCK_FILES) -> list[Path]:
    """Exactly the files the lock files name, their hashes checked, downloaded once per lock.

    pip chooses among a version's wheels for the interpreter it runs on, and the locks name the
    wheels for the local base's Python (Debian bookworm's 3.11), so this one must be a 3.11 too.
    """
    if sys.version_info[:2] != BASE_PYTHON:
        msg = (
            f"expected Python {BASE_PYTHON[0]}.{BASE_PYTHON[1]} to fetch the locked wheels for "
            f"the local base's Python, found {platform.python_version()}; build with a 3.11 "
            f"virtualenv (make venv PYTHON=python3.11) or set {BASES_ENV}=public"
        )
        raise ImageBuildError(msg)
    digest = hashlib.sha256()
    for lock in locks:
        digest.update(lock.read_bytes())
    digest.update(platform.machine().encode())
    wheelhouse = cache / f"wheelhouse-{digest.hexdigest()[:12]}"
    with _locked(cache, "wheelhouse"):
        if not (wheelhouse / ".complete").is_file():
            _download_locked(locks, wheelhouse)
    return sorted(p for p in wheelhouse.iterdir() if p.name.endswith(DISTRIBUTION_SUFFIXES))


def _download_locked(locks: Sequence[Path], wheelhouse: Path) -> None:
    partial = wheelhouse.with_name(wheelhouse.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    # --require-hashes: pip takes only a file whose sha256 the lock names, and fails otherwise.
    command = [sys.executable, "-m", "pip", "download", "--quiet", "--require-hashes"]
    command += ["--no-deps", "--dest", str(partial)]
    result = subprocess.run(  # noqa: S603 - our own interpreter, fixed arguments
        [*command, *(f"--requirement={lock}" for lock in locks)],
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        names = ", ".join(lock.name for lock in locks)
        msg = (
            f"expected pip to download the files {names} name, with their hashes, but it "
            f"exited with {result.returncode}: {result.stderr[-2000:]}\nCheck that PyPI (or "
            "the index in pip's configuration) is reachable; a hash mismatch means a file "
            "changed under its name, or the locks are stale (python devtools/lock_dependencies.py)."
        )
        raise ImageBuildError(msg)
    (partial / ".complete").touch()
    shutil.rmtree(wheelhouse, ignore_errors=True)
    partial.rename(wheelhouse)


# --- Command line -----------------------------------------------------------------------------

KINDS = ("base", "kafka", "dstreams")


def build_images(engine: DockerEngine, kinds: Sequence[str], bases: Bases) -> dict[str, str]:
    """Build (or find) `kinds` in `engine`; returns each kind's image name."""
    client = docker_client(engine.docker_host, timeout_s=BUILD_TIMEOUT_S)
    try:
        builder = ImageBuilder(client, bases, cache_dir(), _print, engine.private)
        made = {
            "base": builder.base_image,
            "kafka": builder.kafka_image,
            "dstreams": builder.dstreams_image,
        }
        return {kind: made[kind]() or "(public bases: none built)" for kind in kinds}
    finally:
        client.close()


def _print(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m service.dev.images",
        description="Build the project's container images, each only when its content changed.",
    )
    parser.add_argument("kinds", nargs="*", choices=KINDS, default=["dstreams"])
    args = parser.parse_args(argv)
    bases = bases_from(os.environ)
    with docker_engine() as engine, engine_environment(engine):
        names = build_images(engine, args.kinds, bases)
    for kind, name in names.items():
        print(f"{kind}: {name}")
    if engine.private:
        print(
            f"(in the engine at {engine.docker_host}, started for this build and stopped again; "
            "its images stay in ~/.cache/dstreams/docker)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
