"""The checkpoint store without Spark: the data-only value format, part files and manifests,
damage detection, and `dstreams checkpoint show|verify`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from pydantic import ValidationError

from service.cli.checkpoint import checkpoint
from service.config.runtime import CheckpointSettings
from service.graph.checkpoint_files import LocalFiles, lines_of
from service.graph.checkpoint_s3 import S3Endpoint, S3Files
from service.graph.checkpoint_store import (
    CHUNK_RECORDS,
    FORMAT_VERSION,
    MANIFEST,
    CheckpointError,
    CheckpointStore,
    PieceManifest,
    decode_row,
    decode_value,
    encode_row,
    encode_value,
    read_partition,
    write_partition,
)
from service.graph.state_functions import KEEP
from service.journal.file import FileJournal
from service.journal.records import CheckpointRecord


@pytest.mark.parametrize(
    "value",
    [None, True, 3, 2.5, "wörd", [1, [2]], (1, "a"), {"k": (1, 2), 3: None}, {1, 2},
     frozenset({"a"}), b"\x00\xff", {"t": [1]}],
)  # fmt: skip
def test_values_round_trip_as_json_data(value: object) -> None:
    encoded = encode_value(value)
    assert decode_value(json.loads(json.dumps(encoded))) == value
    assert type(decode_value(json.loads(json.dumps(encoded)))) is type(value)


class Session:
    pass


def test_state_of_other_types_is_refused_with_what_to_do() -> None:
    with pytest.raises(CheckpointError, match=r"Session.*Convert the state"):
        encode_value([Session()])


def test_state_rows_keep_key_value_and_touched_time() -> None:
    row = (("user", 7), (KEEP, {"n": 2}, 1_000))
    assert decode_row("state", encode_row("state", row)) == row


def write_piece(store: CheckpointStore, ref: str, parts: list[list[object]]) -> None:
    reports = [
        next(write_partition(store.files, ref, "pairs", index, rows))
        for index, rows in enumerate(parts)
    ]
    manifest = PieceManifest.from_reports("pairs", reports)
    (store.files.path(ref) / MANIFEST).write_text(json.dumps(manifest.to_json()))


def test_verify_finds_a_changed_part(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path)
    write_piece(store, "5000/s1-x", [[("a", 1)], [("b", 2), ("c", 3)]])
    assert store.verify("5000/s1-x").total_records == 3
    part = store.files.path("5000/s1-x") / "part-00001.jsonl"
    part.write_text(part.read_text().replace("2", "9"))
    with pytest.raises(CheckpointError, match="part-00001.jsonl does not match its SHA-256"):
        store.verify("5000/s1-x")
    part.unlink()
    with pytest.raises(CheckpointError, match="part-00001.jsonl is missing"):
        store.verify("5000/s1-x")


def test_cli_show_and_verify(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path / "checkpoints")
    write_piece(store, "5000/s1-x", [[("a", 1)]])
    journal_path = tmp_path / "journal"
    with FileJournal(journal_path, owner="test") as journal:
        epoch = journal.open()
        journal.append(CheckpointRecord(epoch, 5000, {"s1-x": "5000/s1-x"}))
    args = ["--path", str(store.files.root), "--file", str(journal_path)]
    shown = CliRunner().invoke(checkpoint, ["show", *args])
    assert shown.exit_code == 0, shown.output
    assert "batch 5000: journaled" in shown.output
    assert "s1-x: 1 partitions, 1 records" in shown.output
    verified = CliRunner().invoke(checkpoint, ["verify", *args])
    assert verified.exit_code == 0 and "batch 5000: ok" in verified.output
    (store.files.path("5000/s1-x") / "part-00000.jsonl").write_text("[]\n")
    damaged = CliRunner().invoke(checkpoint, ["verify", *args])
    assert damaged.exit_code == 1
    assert "no usable checkpoint" in damaged.output


def test_cli_show_prints_a_keys_state_in_each_keyed_piece(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path / "checkpoints")
    write_piece(store, "5000/s1-x", [[("a", 1)], [("b", 2), (("c", 3), [4])]])
    reports = [
        next(write_partition(store.files, "5000/s2-y", "state", 0, [("a", (KEEP, 7, 3000))]))
    ]
    manifest = PieceManifest.from_reports("state", reports)
    (store.files.path("5000/s2-y") / MANIFEST).write_text(json.dumps(manifest.to_json()))
    journal_path = tmp_path / "journal"
    with FileJournal(journal_path, owner="test") as journal:
        epoch = journal.open()
        journal.append(CheckpointRecord(epoch, 5000, {"s1-x": "5000/s1-x", "s2-y": "5000/s2-y"}))
    args = ["--path", str(store.files.root), "--file", str(journal_path)]

    def show(key: str) -> list[str]:
        shown = CliRunner().invoke(checkpoint, ["show", *args, "--key", key])
        assert shown.exit_code == 0, shown.output
        return [line.strip() for line in shown.output.splitlines() if line.startswith("    ")]

    assert show("a") == ["key 'a' = 1", "key 'a' = 7 (last value in batch 3000)"]
    assert show("('c', 3)") == ["key ('c', 3) = [4]", "no key \"('c', 3)\""]
    assert show("z") == ["no key 'z'", "no key 'z'"]


def test_parts_hold_chunks_of_records_and_read_back_in_order(tmp_path: Path) -> None:
    rows = [
        (f"k{i}", (KEEP, (i, "x") if i % 3 else i, 1_000 + i)) for i in range(CHUNK_RECORDS + 5)
    ]
    index, records, size, _ = next(write_partition(LocalFiles(tmp_path), "", "state", 0, rows))
    assert (index, records) == (0, len(rows))
    lines = (tmp_path / "part-00000.jsonl").read_bytes().splitlines()
    assert len(lines) == 2 and size == sum(len(line) + 1 for line in lines)
    assert list(read_partition(LocalFiles(tmp_path), "", "state", [(0, None)])) == rows


def test_version_1_parts_a_record_per_line_still_read(tmp_path: Path) -> None:
    rows = [("a", (KEEP, {"n": 1}, 5)), (("b", 2), (KEEP, [1, 2], 6))]
    (tmp_path / "part-00000.jsonl").write_text("".join(encode_row("state", r) + "\n" for r in rows))
    manifest = PieceManifest.from_json({"v": 1, "format": "state", "partitions": 1,
                                        "records": [2], "sizes": [0], "sha256": ["x"]})  # fmt: skip
    assert manifest.version == 1
    read = read_partition(LocalFiles(tmp_path), "", "state", [(0, None)], manifest.version)
    assert list(read) == rows


def test_a_manifest_of_a_newer_format_is_refused_with_what_to_do(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path)
    write_piece(store, "5000/s1-x", [[("a", 1)]])
    path = store.files.path("5000/s1-x") / MANIFEST
    path.write_text(json.dumps({**json.loads(path.read_text()), "v": FORMAT_VERSION + 1}))
    with pytest.raises(CheckpointError, match=r"format version 3; .*written by a newer dstreams"):
        store.verify("5000/s1-x")


def journaled_store(tmp_path: Path) -> tuple[CheckpointStore, Path]:
    store = CheckpointStore(tmp_path / "checkpoints")
    write_piece(store, "5000/s1-x", [[("a", 1)]])
    journal_path = tmp_path / "journal"
    with FileJournal(journal_path, owner="test") as journal:
        epoch = journal.open()
        journal.append(CheckpointRecord(epoch, 5000, {"s1-x": "5000/s1-x"}))
    return store, journal_path


def job_config(tmp_path: Path, checkpoints: Path, journal_path: Path) -> Path:
    config = tmp_path / "job.yaml"
    config.write_text(
        "app_id: counts\njob: examples.wordcount:build\n"
        "kafka: {bootstrap_servers: 'localhost:9092'}\n"
        f"checkpoint: {{path: '{checkpoints}'}}\n"
        f"journal: {{type: file, path: '{journal_path}'}}\n"
    )
    return config


def test_cli_takes_the_store_and_the_journal_from_the_config(tmp_path: Path) -> None:
    store, journal_path = journaled_store(tmp_path)
    config = job_config(tmp_path, store.files.root, journal_path)
    explicit = ["--path", str(store.files.root), "--file", str(journal_path)]
    for command in ("show", "verify"):
        by_config = CliRunner().invoke(checkpoint, [command, "--config", str(config)])
        assert by_config.exit_code == 0, by_config.output
        assert by_config.output == CliRunner().invoke(checkpoint, [command, *explicit]).output
    shown = CliRunner().invoke(checkpoint, ["show", "--config", str(config)])
    assert "batch 5000: journaled" in shown.output


def test_cli_path_wins_over_the_configs_checkpoint_path(tmp_path: Path) -> None:
    store, journal_path = journaled_store(tmp_path)
    config = job_config(tmp_path, tmp_path / "empty", journal_path)
    args = ["show", "--config", str(config)]
    from_config = CliRunner().invoke(checkpoint, args)
    assert f"has no manifest at {tmp_path / 'empty'}" in from_config.output
    overridden = CliRunner().invoke(checkpoint, [*args, "--path", str(store.files.root)])
    assert overridden.exit_code == 0, overridden.output
    assert "s1-x: 1 partitions, 1 records" in overridden.output


def test_cli_without_a_store_says_what_to_give(tmp_path: Path) -> None:
    _store, journal_path = journaled_store(tmp_path)
    result = CliRunner().invoke(
        checkpoint, ["show", "--file", str(journal_path)], env={"DSTREAMS_CONFIG": None}
    )
    assert result.exit_code == 2
    assert "give --path DIR, or --config JOB.yaml whose checkpoint.path names the store" in (
        result.output
    )


# --- where the store lives ---------------------------------------------------------------------


def test_the_settings_build_a_store_on_object_storage_for_s3_uris(tmp_path: Path) -> None:
    credentials = tmp_path / "credentials"
    credentials.write_text("[default]\naws_access_key_id = a\naws_secret_access_key = b\n")
    settings = CheckpointSettings(
        path="s3a://state/jobs/wc/",
        s3={
            "endpoint_url": "http://minio:9000",
            "path_style": True,
            "credentials_file": credentials,
        },
    )
    files = settings.store().files
    assert isinstance(files, S3Files)
    assert (files.bucket, files.prefix) == ("state", "jobs/wc")
    assert files.endpoint == S3Endpoint("http://minio:9000", None, True, str(credentials))
    assert files.describe("5000/s1-x") == "s3://state/jobs/wc/5000/s1-x"
    local = CheckpointSettings(path=str(tmp_path / "ckpt")).store().files
    assert isinstance(local, LocalFiles) and local.root == tmp_path / "ckpt"


def test_s3_settings_refuse_a_missing_credentials_file_and_a_bad_endpoint(tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match="mount the Secret holding the AWS"):
        CheckpointSettings(path="s3://b/c", s3={"credentials_file": tmp_path / "absent"})
    with pytest.raises(ValidationError, match="endpoint_url"):
        CheckpointSettings(path="s3://b/c", s3={"endpoint_url": "minio:9000"})


def test_a_store_given_a_uri_as_a_local_root_is_refused() -> None:
    with pytest.raises(CheckpointError, match="is a URI; build the store from the checkpoint"):
        CheckpointStore("s3a://bucket/checkpoints")


def test_local_files_publish_whole_or_not_at_all(tmp_path: Path) -> None:
    files = LocalFiles(tmp_path)
    with files.writer("1000/p/part-00000.jsonl") as out:
        out.write(b"a\nbc\n")
    with pytest.raises(RuntimeError), files.writer("1000/p/part-00001.jsonl") as out:
        out.write(b"half")
        raise RuntimeError
    assert files.size("1000/p/part-00000.jsonl") == 5
    assert files.size("1000/p/part-00001.jsonl") is None
    assert [p.name for p in (tmp_path / "1000" / "p").iterdir()] == ["part-00000.jsonl"]
    assert files.children() == ["1000"] and files.children("1000") == ["p"]
    files.delete_tree("1000")
    assert files.children() == []


@pytest.mark.parametrize("size", [1, 2, 3, 7, 100])
def test_lines_are_split_whatever_the_block_size(size: int) -> None:
    data = b"[1]\n[2,3]\n\xc3\xa9\n[4]"
    blocks = [data[i : i + size] for i in range(0, len(data), size)]
    assert list(lines_of(blocks)) == [b"[1]", b"[2,3]", b"\xc3\xa9", b"[4]"]
