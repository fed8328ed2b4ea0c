"""Checkpoints on S3-compatible object storage, against a real S3 server (SeaweedFS, started by
the `s3_server` fixture): written by Spark's tasks, verified and read back, a damaged part
refused, a checkpoint whose manifests never landed ignored by a recovery that then writes exactly
what an uninterrupted driver writes, and old checkpoints deleted. What does not depend on where
the bytes live (falling back past a damaged checkpoint, replaying a planned batch) is tested on
files, in `test_state_recovery`.

The session's SparkContext started before the server, so its Python workers do not see the
server's keys in their environment: the store takes them from an AWS shared-credentials file
(`checkpoint.s3.credentials_file`), as a mounted Secret would give them. The chaos tier's driver
processes take them from the environment instead (`tests/chaos/test_state_chaos.py`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from service.config.runtime import CheckpointSettings
from service.driver.recovery import read_state
from service.graph.checkpoint_s3 import ObjectStorageError, S3Files
from service.graph.checkpoint_store import MANIFEST, CheckpointError, CheckpointStore
from service.testing import FIRST_BATCH_MS
from sinks.memory import MemorySink
from tests.spark.test_state_recovery import Driver, make_input, outputs_of, uninterrupted


class Crash(BaseException):
    """Stands for the driver dying at the point where it is raised: like a process's death, it
    is no error the store cleans up after (`except Exception`)."""


class DiesBeforeManifests(CheckpointStore):
    """A store whose driver dies after the tasks wrote every part, before any manifest."""

    def write_manifest(self, ref: str, manifest: Any) -> Any:
        raise Crash(ref)


def s3_settings(server: Any, tmp_path: Path, prefix: str, secret: str | None = None) -> Any:
    # A file of its own per key: each process caches a client (and its keys) per file.
    credentials = tmp_path / ("aws-credentials" if secret is None else "aws-credentials-wrong")
    credentials.write_text(
        "[default]\n"
        f"aws_access_key_id = {server.credentials['AWS_ACCESS_KEY_ID']}\n"
        f"aws_secret_access_key = {secret or server.credentials['AWS_SECRET_ACCESS_KEY']}\n"
    )
    return CheckpointSettings(
        path=f"s3a://{server.bucket}/{prefix}/checkpoints",
        s3={
            "endpoint_url": server.endpoint_url,
            "region": "us-east-1",
            "path_style": True,
            "credentials_file": credentials,
        },
    )


@pytest.fixture
def store(s3_server: Any, tmp_path: Path, unique_name: str) -> CheckpointStore:
    return s3_settings(s3_server, tmp_path, unique_name).store()


def keys_under(server: Any, store: CheckpointStore) -> list[str]:
    files = store.files
    assert isinstance(files, S3Files)
    pages = server.client().get_paginator("list_objects_v2")
    found = pages.paginate(Bucket=files.bucket, Prefix=files.prefix + "/")
    keys = [item["Key"] for page in found for item in page.get("Contents", [])]
    return sorted(key[len(files.prefix) + 1 :] for key in keys)


def test_tasks_write_parts_and_the_driver_reads_them_back(
    sc: Any, s3_server: Any, store: CheckpointStore
) -> None:
    pairs = [(f"k{i}", i) for i in range(500)]
    rdd = sc.parallelize(pairs, 3).partitionBy(3)
    manifests = store.write_pieces(sc, [(rdd, "7000/s1-state", "pairs")])
    store.sync(7000)
    assert manifests["7000/s1-state"].total_records == 500
    assert keys_under(s3_server, store) == [
        "7000/s1-state/_manifest.json",
        *(f"7000/s1-state/part-0000{p}.jsonl" for p in range(3)),
    ]
    manifest = store.verify("7000/s1-state")
    assert manifest == manifests["7000/s1-state"]
    loaded = store.load(sc, "7000/s1-state", manifest)
    assert loaded.getNumPartitions() == 3 and loaded.partitioner is not None
    assert sorted(loaded.collect()) == sorted(pairs)
    assert store.batch_times() == [7000]
    assert store.pieces(7000) == {"s1-state": "7000/s1-state"}


def test_a_changed_or_missing_part_is_refused(
    sc: Any, s3_server: Any, store: CheckpointStore
) -> None:
    rdd = sc.parallelize([("a", 1), ("b", 22), ("c", 3)], 2)
    store.write_pieces(sc, [(rdd, "5000/s1-x", "pairs")])
    files = store.files
    assert isinstance(files, S3Files)
    client, key = s3_server.client(), files.key("5000/s1-x/part-00001.jsonl")
    body = client.get_object(Bucket=files.bucket, Key=key)["Body"].read()
    # One digit changed for another: the same size, so only the SHA-256 can tell.
    changed = body.replace(b"2", b"9") if b"2" in body else body.replace(b"3", b"8")
    assert changed != body and len(changed) == len(body)
    client.put_object(Bucket=files.bucket, Key=key, Body=changed)
    with pytest.raises(CheckpointError, match="part-00001.jsonl does not match its SHA-256"):
        store.verify("5000/s1-x")
    client.delete_object(Bucket=files.bucket, Key=key)
    with pytest.raises(CheckpointError, match="part-00001.jsonl is missing"):
        store.verify("5000/s1-x")
    client.delete_object(Bucket=files.bucket, Key=files.key(f"5000/s1-x/{MANIFEST}"))
    with pytest.raises(CheckpointError, match="has no manifest at s3://.*it is missing"):
        store.verify("5000/s1-x")


def test_a_checkpoint_whose_manifests_never_landed_is_not_used_and_old_ones_are_deleted(
    sc: Any, s3_server: Any, store: CheckpointStore, tmp_path: Path
) -> None:
    lines = make_input(5, 12)
    expected = uninterrupted(lines)
    sink = MemorySink()
    first = Driver(sc, tmp_path / "run", lines, sink, store=store)
    first.recover()
    first.run(0, 3)  # a checkpoint after batch 2
    dying = Driver(sc, tmp_path / "run", lines, sink, store=DiesBeforeManifests(store.files))
    dying.recover()
    with pytest.raises(Crash):
        dying.run(3, 3)  # batch 5's parts are written, then the driver dies
    half_written = str(FIRST_BATCH_MS + 5_000)
    left = [key for key in keys_under(s3_server, store) if key.startswith(half_written + "/")]
    assert left and not any(key.endswith(MANIFEST) for key in left), left
    second = Driver(sc, tmp_path / "run", lines, sink, store=store)
    assert second.recover() == 3  # from the checkpoint of batch 2: batches 3, 4 and 5
    second.run(6, len(lines) - 6)  # checkpoints after batches 6 and 9
    assert outputs_of(sink) == expected
    # Retention: the bucket holds only the two checkpoints the journal retains, each part
    # matching its manifest; the older one and the half-written one are deleted.
    retained = read_state(second.journal).retained_checkpoints
    kept = [c.batch_time for c in retained]
    assert kept == [FIRST_BATCH_MS + 6_000, FIRST_BATCH_MS + 9_000]
    assert store.batch_times() == kept
    assert {key.split("/")[0] for key in keys_under(s3_server, store)} == {str(t) for t in kept}
    for record in retained:
        for ref in record.refs.values():
            store.verify(ref)


def test_wrong_credentials_are_refused_at_start_without_showing_them(
    s3_server: Any, tmp_path: Path, unique_name: str
) -> None:
    secret = "not-the-secret-" + unique_name  # noqa: S105 - a wrong key, on purpose
    store = s3_settings(s3_server, tmp_path, unique_name, secret=secret).store()
    with pytest.raises(ObjectStorageError) as refused:
        store.files.check_reachable()
    message = str(refused.value)
    assert f"reach the bucket of s3://{s3_server.bucket}/{unique_name}" in message
    assert "AWS_ACCESS_KEY_ID" in message and "credentials_file" in message
    assert secret not in message
    s3_settings(s3_server, tmp_path, unique_name).store().files.check_reachable()


def test_the_manifest_is_json_naming_every_part(
    sc: Any, s3_server: Any, store: CheckpointStore
) -> None:
    store.write_pieces(sc, [(sc.parallelize([1, 2, 3], 2), "9000/s1-rows", "rows")])
    files = store.files
    assert isinstance(files, S3Files)
    key = files.key(f"9000/s1-rows/{MANIFEST}")
    manifest = json.loads(
        s3_server.client().get_object(Bucket=files.bucket, Key=key)["Body"].read()
    )
    assert manifest["partitions"] == 2 and manifest["records"] == [1, 2]
    loaded = store.load(sc, "9000/s1-rows", store.verify("9000/s1-rows"))
    assert sorted(loaded.collect()) == [1, 2, 3]
