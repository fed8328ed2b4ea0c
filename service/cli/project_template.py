"""The files `dstreams init NAME` writes: a job, its config, its test, and its image.

Each is a `string.Template` (`$name`, `$module`, `$version`), so the Python and YAML in them keep
their braces. The job is a word count, the smallest job that shows a source, a shuffle and an
output; its test runs on the pytest plugin's fast path, with no broker.
"""

from __future__ import annotations

from string import Template

JOB = Template('''\
"""$name: counts the words of each batch of source `lines` and writes them to output `counts`.

Spark's Python workers import this module by name to run the functions below, so keep them
top-level functions here (or in modules beside it), and keep them free of the wall clock and of
randomness: a replayed batch must give the same output.
"""

from __future__ import annotations

from service.graph.context import StreamingContext


def words(line: str) -> list[str]:
    return line.lower().split()


def one(word: str) -> tuple[str, int]:
    return (word, 1)


def add(left: int, right: int) -> int:
    return left + right


def build(ctx: StreamingContext) -> None:
    ctx.source("lines").flat_map(words).map(one).reduce_by_key(add).write("counts")
''')

CONFIG = Template("""\
# The configuration of $name: the file `dstreams run --config` reads, and the Helm chart's
# `config:` value. Paths are under /var/lib/dstreams, where the image and the chart keep their
# volume; to run it on this machine, override them, e.g.
#   DSTREAMS_JOURNAL__PATH=state/journal DSTREAMS_SINKS__COUNTS__PATH=state/out \\
#     dstreams run --config job.yaml
app_id: $name
job: $module:build
batch_interval_ms: 1000
kafka:
  bootstrap_servers: localhost:9092
  # A 1-broker development Kafka: warn about unreplicated topics instead of refusing to start.
  require_replication: false
sources:
  lines:
    topics: [$name-lines]
    starting_offsets: earliest
    codec: utf-8
sinks:
  counts:
    type: files
    path: /var/lib/dstreams/out
journal:
  type: file
  path: /var/lib/dstreams/journal
http:
  port: 8080
""")

TEST = Template('''\
"""Tests of $module on the dstreams pytest plugin's fast path: lists in, rows out per batch."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def test_counts_the_words_of_each_batch(job_runner: Callable[..., Any]) -> None:
    lines = [["the cat", "The hat"], [], ["hat"]]  # three batches; the second is empty

    run = job_runner("$module:build", {"lines": lines})

    assert run.output("counts") == [[("cat", 1), ("hat", 1), ("the", 2)], [], [("hat", 1)]]
''')

PYPROJECT = Template("""\
# pytest's settings for $name: the project's folder is on the import path, so that the
# tests and Spark's workers import $module by name.
[tool.pytest.ini_options]
pythonpath = ["."]
testpaths = ["tests"]
""")

DOCKERFILE = Template("""\
# $name on the dstreams image. The image runs `dstreams run --config /etc/dstreams/config.yaml`
# in /app, which is on PYTHONPATH (for the driver and for Spark's workers), so the job's module
# goes there; the Helm chart mounts its `config:` value at /etc/dstreams/config.yaml.
ARG DSTREAMS_IMAGE=dstreams:$version
FROM $${DSTREAMS_IMAGE}
COPY $module.py /app/
# The config for a plain `docker run`; under the chart, its ConfigMap is mounted over it.
COPY job.yaml /etc/dstreams/config.yaml
""")

DOCKERIGNORE = Template("""\
*
!$module.py
!job.yaml
""")

README = Template("""\
# $name

A dstreams job: `$module.py` builds the graph (`build(ctx)`), `job.yaml` configures its Kafka
source `lines` and its output `counts`.

## Test it

    pip install pytest
    pytest

`tests/test_$module.py` runs the job on lists, batch by batch, on a local Spark, with no broker
(the `job_runner` fixture of the dstreams pytest plugin, installed with dstreams). The plugin's
`kafka_bootstrap`, `postgres_dsn` and `job_service` fixtures run it for real, as the service.

## Run it here

    dstreams dev kafka    # a local broker; prints its address
    DSTREAMS_KAFKA__BOOTSTRAP_SERVERS=<address> DSTREAMS_JOURNAL__PATH=state/journal \\
      DSTREAMS_SINKS__COUNTS__PATH=state/out dstreams run --config job.yaml

## Build its image and deploy it with the chart

The image is the dstreams image with the job's module in /app (see `Dockerfile`):

    docker build -t $name:0.1.0 .                  # FROM dstreams:$version
    docker build --build-arg DSTREAMS_IMAGE=registry.example.com/dstreams:$version -t $name:0.1.0 .

The chart runs it as it runs the dstreams image: give it the image, and the content of
`job.yaml` as its `config:` value (the chart mounts that at /etc/dstreams/config.yaml):

    # values.yaml
    image:
      repository: $name
      tag: "0.1.0"
    config:
      app_id: $name
      job: $module:build
      ...                                          # the rest of job.yaml

    helm install $name <path to the dstreams chart> -f values.yaml
""")


def project_files(name: str, module: str, version: str) -> dict[str, str]:
    """The new project's files, by path relative to its folder."""
    fields = {"name": name, "module": module, "version": version}
    templates = {
        f"{module}.py": JOB,
        "job.yaml": CONFIG,
        f"tests/test_{module}.py": TEST,
        "pyproject.toml": PYPROJECT,
        "Dockerfile": DOCKERFILE,
        ".dockerignore": DOCKERIGNORE,
        "README.md": README,
    }
    return {path: template.substitute(fields) for path, template in templates.items()}
