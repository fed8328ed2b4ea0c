"""The plugin's fast path refuses, before Spark runs anything, a test that cannot mean what it
says: a source it gave no input for, input for a source the job never reads, Kafka records."""

from __future__ import annotations

import pytest

from service.errors import ConfigError
from service.graph.context import StreamingContext
from service.testing.jobs import JobRun, run_job


def reads_lines(ctx: StreamingContext) -> None:
    ctx.source("lines").write("copies")


def reads_records(ctx: StreamingContext) -> None:
    ctx.kafka_records("lines").values().write("copies")


def test_a_source_without_input_is_named() -> None:
    with pytest.raises(ConfigError, match=r"source 'lines'.*no input for it \(given: line\)"):
        run_job(None, reads_lines, {"line": [["a"]]})


def test_input_the_job_never_reads_is_named() -> None:
    with pytest.raises(ConfigError, match=r"input for \['words'\].*never read"):
        run_job(None, reads_lines, {"lines": [["a"]], "words": [["b"]]})


def test_kafka_records_point_to_the_real_path() -> None:
    with pytest.raises(ConfigError, match="job_service"):
        run_job(None, reads_records, {"lines": [["a"]]})


def test_a_job_named_by_reference_that_does_not_import_is_named() -> None:
    with pytest.raises(ConfigError, match="cannot import module 'no_such_job'"):
        run_job(None, "no_such_job:build", {"lines": [["a"]]})


def test_an_output_it_did_not_write_names_those_it_did() -> None:
    run = JobRun([1000], {"counts": [[("a", 1)]]})

    assert run.rows("counts") == [("a", 1)]
    with pytest.raises(KeyError, match="no output 'totals'; it wrote: counts"):
        run.output("totals")
