# dstreams service image. Build from the repository root:
#   docker build -t dstreams:0.1.0 .
# or, where no public image registry is reachable, `make image` (service/dev/images.py): the same
# file on a Debian base built locally, with the locked Python distributions in the build context
# and no network inside the build.
#
# Two stages: the builder installs the project into a virtualenv (it needs pip and build tools the
# service never uses); the runtime stage copies only that venv onto a slim base with a Java runtime.
#
# Reproducible: every Python distribution comes from the lock files (requirements.lock and
# requirements-build.lock, written by devtools/lock_dependencies.py) with its sha256 checked, so
# two builds of one commit install the same versions of the same files. Lean: the development
# tooling (service/dev: local Kafka, Docker engine, image builds) is not in the image.

# Bookworm, not the newer default: Spark 4 needs Java 17 and Debian ships openjdk-17 only up to
# bookworm. Builder and runtime use the same base so the venv's interpreter path stays valid.
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS builder
# PIP_FIND_LINKS: distributions in the build context under wheelhouse/ are used first. An offline
# build brings exactly the locked files (pip download --require-hashes, service/dev/images.py)
# and sets the build argument PIP_NO_INDEX=1; a plain `docker build .` has none, and pip
# downloads the same files from PyPI. Either way --require-hashes takes no file the lock does
# not name by its hash.
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_FIND_LINKS=/wheelhouse
ARG PIP_NO_INDEX
RUN python3 -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH
WORKDIR /src
# A lock file is named too because COPY needs one source that exists when wheelhouse/ does not;
# a lock, not README.md, so that editing the README does not reinstall every dependency.
COPY requirements-build.lock wheelhous[e] /wheelhouse/
COPY requirements-build.lock requirements.lock ./
# The dependencies get their own layer, before the source: an edit to the source reuses it.
# First pip and the build backend, pinned, because they build what follows: pyspark is published
# only as an sdist, so the locked sdist (its hash checked) is built into a wheel here, by these
# pinned tools (--no-build-isolation: an isolated build would fetch setuptools unpinned). The
# wheel's own hash is not locked: a build is not byte-for-byte reproducible, the sdist is.
# Without --no-deps, pip also refuses a dependency the lock leaves out.
RUN pip install --require-hashes --no-deps -r requirements-build.lock \
    && pip install --require-hashes --no-build-isolation -r requirements.lock
# Only what `pip install .` reads, so an edit to tests or docs does not invalidate this layer.
COPY pyproject.toml README.md ./
COPY service/ service/
COPY connectors/ connectors/
COPY sinks/ sinks/
# No dev extras: pytest, ruff and mypy stay out of the image. pip compiles .pyc files here, which
# matters because the pod runs with a read-only root filesystem and could not write them later.
# service/dev is the development tooling (local Kafka, Docker engine, image builds): installed by
# the distribution for `dstreams dev` in a checkout, deleted here. Nothing the image runs imports
# it (import contracts in pyproject.toml); `dstreams dev` says it is not installed. The path is
# the venv's site-packages, not /src/service (the working directory), and rmtree fails the build
# should the package ever not be there. Then the build tools go too (about 20 MB): nothing in
# requirements.lock needs them at run time, and the pod's root filesystem is read-only, so pip
# could install nothing there anyway. The venv then holds exactly requirements.lock and dstreams.
RUN pip install --no-deps --no-build-isolation . \
    && python -c 'import shutil, sysconfig; shutil.rmtree(sysconfig.get_path("purelib") + "/service/dev")' \
    && pip uninstall --yes --quiet setuptools wheel packaging pip

FROM ${PYTHON_IMAGE} AS runtime
ARG VERSION=0.1.0
ARG REVISION=unknown
LABEL org.opencontainers.image.title="dstreams" \
      org.opencontainers.image.description="Exactly-once Discretized Streams on PySpark, fed by Kafka" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.licenses="Apache-2.0"

# openjdk-17-jre-headless: PySpark's driver starts a JVM. tini: see ENTRYPOINT below.
# Installed only when the base lacks them: the locally built base already holds both, and its
# build has no network. The man1 directory works around the JRE's postinst failing on slim
# images that strip man pages.
RUN dpkg -s openjdk-17-jre-headless tini >/dev/null 2>&1 \
    || { mkdir -p /usr/share/man/man1 \
         && apt-get update \
         && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
             openjdk-17-jre-headless tini \
         && rm -rf /var/lib/apt/lists/*; }

# Fixed UID/GID so the chart's securityContext and PersistentVolume ownership (fsGroup) can name it.
RUN groupadd --system --gid 10001 dstreams \
    && useradd --system --uid 10001 --gid 10001 --home-dir /home/dstreams --create-home \
        --shell /usr/sbin/nologin dstreams \
    && mkdir -p /var/lib/dstreams \
    && chown 10001:10001 /var/lib/dstreams
# /var/lib/dstreams is where the chart mounts its volume; point journal.path and checkpoint.path
# there (the built-in defaults are relative to /app, which this user cannot write).

COPY --from=builder /opt/venv /opt/venv

WORKDIR /app
COPY config/ config/
COPY examples/ examples/
# The license the labels name: Apache-2.0 asks that every copy passed on carries its text.
COPY LICENSE LICENSE

# PYTHONHASHSEED: hash partitioning must put a key in the same partition on every replay, on the
#   driver and in every Python worker (exactly-once depends on it).
# PYTHONUNBUFFERED: JSON log lines reach the container log as they are written, not at exit.
# SPARK_LOCAL_IP is left unset: dstreams pins local mode to loopback itself, and Spark on Kubernetes
#   (the chart's spark.mode kubernetes) runs executor pods from this image, which must bind their
#   pod IP.
# PYTHONPATH: jobs are named module:function (e.g. examples.wordcount:build). The driver imports
#   them from its working directory (`--app-dir`, /app here) by itself, but the Python workers of
#   executor pods (`dstreams executor`) do not run that code, so /app is put there explicitly.
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONHASHSEED=0 \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONPATH=/app \
    DSTREAMS_CONFIG_DIR=/app/config \
    DSTREAMS_CLASS_ARCHIVE_DIR=/opt/dstreams/class-archive

# The driver JVM's class-data archive (spark.class_archive: auto finds it through
# DSTREAMS_CLASS_ARCHIVE_DIR): Spark starts about a second faster. Built here, by the JVM and the
# pyspark of this image, with a short local Spark job; root-owned and read-only at run time.
RUN dstreams class-archive

USER 10001:10001
EXPOSE 8080

# Exec form, no shell: SIGTERM from Kubernetes reaches Python, which lets the running batch finish.
# tini is PID 1 only to reap zombies: Spark's JVM and its Python workers fork children that outlive
# their parents on failure, and a Python PID 1 never waits for processes it did not start. tini
# forwards SIGTERM to dstreams alone (no -g), so the JVM is not killed under the running batch;
# dstreams stops Spark itself once the batch is committed.
ENTRYPOINT ["/usr/bin/tini", "--", "dstreams"]
CMD ["run", "--config", "/etc/dstreams/config.yaml"]
