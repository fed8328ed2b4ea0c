"""Shared-storage rules: on a cluster, file outputs and checkpoints are refused at start-up unless
every executor can see them."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from service.config.masters import SparkMaster, parse_master
from service.config.settings import FilesSinkSettings, InvalidConfig, Settings, load_settings
from service.config.storage import shared_path_problem, writable_problem
from service.driver.engine import build_context, check_storage

K8S = parse_master("k8s://https://kubernetes.default.svc")
REMOTE = parse_master("spark://10.0.0.5:7077")
LOOPBACK = parse_master("spark://127.0.0.1:7077")
LOCAL = parse_master("local[2]")


@pytest.mark.parametrize("master", [LOCAL, LOOPBACK, REMOTE, K8S])
def test_an_absolute_path_on_shared_storage_is_fine_anywhere(master: SparkMaster) -> None:
    assert shared_path_problem("sinks.o.path", "/var/lib/dstreams/out", master) is None


def test_local_mode_accepts_relative_paths() -> None:
    assert shared_path_problem("sinks.o.path", "out", LOCAL) is None


@pytest.mark.parametrize("master", [LOOPBACK, REMOTE, K8S])
def test_a_relative_path_is_refused_on_any_cluster(master: SparkMaster) -> None:
    problem = shared_path_problem("sinks.o.path", "out", master)
    assert problem is not None
    assert problem.startswith("sinks.o.path: 'out' is a relative path")


@pytest.mark.parametrize("path", ["/tmp/out", "/var/tmp/x", "/dev/shm/x", "file:///tmp/out"])
def test_a_hosts_own_scratch_space_is_refused_where_executors_are_elsewhere(path: str) -> None:
    for master in (REMOTE, K8S):
        problem = shared_path_problem("checkpoint.path", path, master, uris=True)
        assert problem is not None and "its own copy" in problem


def test_scratch_space_is_shared_when_every_executor_runs_on_this_host() -> None:
    assert shared_path_problem("sinks.o.path", "/tmp/out", LOOPBACK) is None


def test_uris_are_for_writers_that_understand_them() -> None:
    assert shared_path_problem("checkpoint.path", "s3a://bucket/ckpt", K8S, uris=True) is None
    problem = shared_path_problem("sinks.o.path", "s3a://bucket/out", K8S)
    assert problem is not None and "local file system" in problem


def test_load_settings_refuses_each_unshared_path_on_its_own_line(tmp_path: Path) -> None:
    config = tmp_path / "job.yaml"
    config.write_text(
        "app_id: wc\njob: examples.wordcount:build\n"
        "kafka: {bootstrap_servers: 'k:9092'}\n"
        "spark: {master: 'spark://10.0.0.5:7077'}\n"
        "sinks: {a: {type: files, path: out}, b: {type: files, path: /mnt/shared/b}}\n"
    )
    with pytest.raises(InvalidConfig) as caught:
        load_settings(config, {})
    problems = caught.value.problems
    # The checkpoint path is the graph's business (see below): settings alone do not know it.
    assert [line.split(":")[0] for line in problems] == ["sinks.a.path"]


def cluster_settings(job: str) -> Settings:
    """A job on a remote standalone cluster with the default (relative) checkpoint path."""
    return Settings.model_validate(
        {
            "app_id": "wc",
            "job": job,
            "kafka": {"bootstrap_servers": "127.0.0.1:1"},
            "spark": {"master": "spark://10.0.0.5:7077"},
            "sources": {"lines": {"topics": ["lines"]}},
            "sinks": {name: {"type": "console"} for name in ("counts", "totals")},
        }
    )


def test_a_stateless_job_on_a_cluster_needs_no_checkpoint_path() -> None:
    settings = cluster_settings("examples.wordcount:build")
    assert settings.checkpoint.path == "state/checkpoints"
    ctx = build_context(settings)
    try:
        check_storage(settings, ctx)
    finally:
        ctx.close()


def test_a_stateful_job_on_a_cluster_is_refused_an_unshared_checkpoint_path() -> None:
    settings = cluster_settings("examples.running_totals:build")
    ctx = build_context(settings)
    try:
        with pytest.raises(InvalidConfig) as caught:
            check_storage(settings, ctx)
    finally:
        ctx.close()
    assert [line.split(":")[0] for line in caught.value.problems] == ["checkpoint.path"]


def test_the_same_file_is_fine_in_local_mode(tmp_path: Path) -> None:
    config = tmp_path / "job.yaml"
    config.write_text(
        "app_id: wc\njob: examples.wordcount:build\n"
        "kafka: {bootstrap_servers: 'k:9092'}\n"
        "sinks: {a: {type: files, path: out}}\n"
    )
    sink = load_settings(config, {}).sinks["a"]
    assert isinstance(sink, FilesSinkSettings) and sink.path == "out"


# --- writable paths (a check of `dstreams check` and of the driver's start) ---------------------


def test_a_path_not_made_yet_is_writable_where_its_nearest_folder_is(tmp_path: Path) -> None:
    assert writable_problem("sinks.o.path", str(tmp_path / "a" / "b")) is None
    assert writable_problem("journal.path", f"file://{tmp_path}/j", folder=False) is None


def test_a_file_where_a_folder_must_be_is_named(tmp_path: Path) -> None:
    (tmp_path / "out").write_text("")
    problem = writable_problem("sinks.o.path", str(tmp_path / "out" / "counts"))
    assert problem == (
        f"sinks.o.path: {tmp_path / 'out'} is a file, where "
        f"{str(tmp_path / 'out' / 'counts')!r} needs a folder"
    )


def test_a_uri_of_another_file_system_is_left_to_it() -> None:
    assert writable_problem("checkpoint.path", "s3a://bucket/checkpoints") is None


@pytest.mark.skipif(os.getuid() == 0, reason="root may write anywhere: nothing to refuse")
def test_a_read_only_folder_is_refused_naming_the_user(tmp_path: Path) -> None:
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    problem = writable_problem("checkpoint.path", str(locked / "ckpt"))
    assert problem is not None
    assert problem.startswith(f"checkpoint.path: {locked} is not writable by this user")


# --- object storage --------------------------------------------------------------------------


@pytest.mark.parametrize("master", [LOCAL, K8S])
@pytest.mark.parametrize("path", ["s3://bucket/out", "s3a://bucket/out"])
def test_the_files_sink_refuses_object_storage_on_any_master_saying_why(
    master: SparkMaster, path: str
) -> None:
    problem = shared_path_problem("sinks.o.path", path, master)
    assert problem is not None
    assert problem.startswith(f"sinks.o.path: {path!r} is on object storage")
    assert "If-None-Match" in problem and "mounted path" in problem


@pytest.mark.parametrize("master", [LOCAL, K8S])
def test_checkpoints_take_s3_uris_and_no_other_scheme(master: SparkMaster) -> None:
    assert shared_path_problem("checkpoint.path", "S3://bucket/c", master, uris=True) is None
    problem = shared_path_problem("checkpoint.path", "hdfs://nn/c", master, uris=True)
    assert problem is not None and "s3://BUCKET/PREFIX" in problem


def test_load_settings_refuses_a_files_sink_on_s3_in_local_mode(tmp_path: Path) -> None:
    config = tmp_path / "job.yaml"
    config.write_text(
        "app_id: wc\njob: examples.wordcount:build\n"
        "kafka: {bootstrap_servers: 'k:9092'}\n"
        "sinks: {a: {type: files, path: 's3a://bucket/out'}}\n"
    )
    with pytest.raises(InvalidConfig) as caught:
        load_settings(config, {})
    assert [line.split(":")[0] for line in caught.value.problems] == ["sinks.a.path"]
