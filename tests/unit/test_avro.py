"""Avro without a broker: decoders and encoders in both framings, schema resolution, every kind of
malformed record, the registry through confluent-kafka's `mock://` client, the files sink's
container files and the settings that refuse what cannot work."""

from __future__ import annotations

import io
import json
import pickle
import struct
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import fastavro
import pytest
import yaml
from confluent_kafka.schema_registry import Schema

from connectors.avro import (
    AvroDecoder,
    AvroEncoder,
    AvroOutput,
    close_registries,
    registry,
    subject_for,
)
from connectors.codecs import DecodeError, KeyedCodec, ParsingCodec
from service.config.settings import InvalidConfig, load_settings
from service.errors import ConfigError
from sinks.base import BatchKey
from sinks.files import FileSink

WORD_V1 = {
    "type": "record",
    "name": "Word",
    "fields": [{"name": "word", "type": "string"}, {"name": "n", "type": "long"}],
}
# v2 adds a field with a default and drops none: readers of v2 can read v1 data.
WORD_V2 = {
    "type": "record",
    "name": "Word",
    "fields": [
        {"name": "word", "type": "string"},
        {"name": "n", "type": "long"},
        {"name": "lang", "type": "string", "default": "en"},
    ],
}
V1 = json.dumps(WORD_V1)
V2 = json.dumps(WORD_V2)


@pytest.fixture
def mock_registry() -> Iterator[dict[str, str]]:
    conf = {"url": f"mock://{uuid.uuid4().hex}"}
    yield conf
    close_registries()


def body(schema: dict[str, Any], value: Any) -> bytes:
    buffer = io.BytesIO()
    fastavro.schemaless_writer(buffer, fastavro.parse_schema(schema), value)
    return buffer.getvalue()


def test_plain_avro_round_trips_with_a_schema_file_schema() -> None:
    encoded = AvroEncoder(V1)(("alpha", 3))
    assert encoded == body(WORD_V1, {"word": "alpha", "n": 3})
    assert AvroDecoder(writer_schema=V1)(encoded) == {"word": "alpha", "n": 3}
    assert AvroDecoder(writer_schema=V1)(None) is None


def test_a_reader_schema_resolves_added_and_removed_fields() -> None:
    old = AvroEncoder(V1)({"word": "alpha", "n": 3})
    assert AvroDecoder(writer_schema=V1, reader_schema=V2)(old) == {
        "word": "alpha",
        "n": 3,
        "lang": "en",
    }
    new = AvroEncoder(V2)({"word": "beta", "n": 1, "lang": "de"})
    assert AvroDecoder(writer_schema=V2, reader_schema=V1)(new) == {"word": "beta", "n": 1}
    incompatible = json.dumps(
        {"type": "record", "name": "Word", "fields": [{"name": "x", "type": "int"}]}
    )
    with pytest.raises(DecodeError, match="cannot be read with the reader schema"):
        AvroDecoder(writer_schema=V1, reader_schema=incompatible)(old)


def test_wire_format_round_trips_through_the_registry(mock_registry: dict[str, str]) -> None:
    output = AvroOutput(V1, None, mock_registry, auto_register=True)
    output.prepare("words")
    encoded = output.encode_value(("alpha", 3))
    assert encoded is not None
    schema_id = registry(mock_registry).lookup_schema("words-value", Schema(V1, "AVRO")).schema_id
    assert encoded[:5] == struct.pack(">bI", 0, schema_id)
    decoder = AvroDecoder(registry=mock_registry, reader_schema=V2)
    assert decoder(encoded) == {"word": "alpha", "n": 3, "lang": "en"}
    # Decoders and encoders travel to executors as configuration.
    assert pickle.loads(pickle.dumps(decoder))(encoded) == decoder(encoded)
    assert pickle.loads(pickle.dumps(output)).encode_value(("alpha", 3)) == encoded


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (b"\x01\x00\x00\x00\x01\x02", "bad magic byte 1"),
        (b"\x00\x00\x00", "truncated: 3 bytes"),
        (b"\x00\x00\x00\x7f\xff\x02", "unknown schema id 32767"),
        (None, None),
    ],
)
def test_malformed_wire_records_are_decode_errors(
    mock_registry: dict[str, str], raw: bytes | None, reason: str | None
) -> None:
    decoder = AvroDecoder(registry=mock_registry)
    if reason is None:
        assert decoder(raw) is None
        return
    with pytest.raises(DecodeError, match=reason):
        decoder(raw)


def test_truncated_and_overlong_bodies_are_decode_errors() -> None:
    good = AvroEncoder(V1)(("alpha", 3))
    decoder = AvroDecoder(writer_schema=V1)
    with pytest.raises(DecodeError, match="invalid Avro body"):
        decoder(good[:3])
    with pytest.raises(DecodeError, match="2 bytes left after the record"):
        decoder(good + b"\x00\x00")


def test_keys_decode_with_their_own_codec_and_parse_functions_keep_them() -> None:
    keyed = KeyedCodec(AvroDecoder(writer_schema=V1), "utf-8")
    assert keyed.key_codec(b"k") == "k"
    parsing = ParsingCodec(keyed, lambda value: value["n"])
    assert parsing(AvroEncoder(V1)(("a", 7))) == 7
    assert parsing.key_codec is keyed.key_codec


def test_the_sink_refuses_at_setup_what_the_registry_does_not_have(
    mock_registry: dict[str, str],
) -> None:
    with pytest.raises(ConfigError, match="subject 'counts-value' has no schema"):
        AvroOutput(None, None, mock_registry, auto_register=False).prepare("counts")
    with pytest.raises(ConfigError, match="not registered under 'counts-value'.*auto_register"):
        AvroOutput(V1, None, mock_registry, auto_register=False).prepare("counts")
    registry(mock_registry).register_schema(subject_for("counts"), Schema(V2, "AVRO"))
    latest = AvroOutput(None, None, mock_registry, auto_register=False)
    latest.prepare("counts")
    encoded = latest.encode_value(("a", 1, "fr"))
    assert AvroDecoder(registry=mock_registry)(encoded) == {"word": "a", "n": 1, "lang": "fr"}
    with pytest.raises(ValueError, match="row of 2 fields"):
        latest.encode_value(("a", 1))


def test_avro_keys_are_written_under_the_key_subject(mock_registry: dict[str, str]) -> None:
    key_schema = json.dumps("string")
    output = AvroOutput(V1, key_schema, mock_registry, auto_register=True)
    output.prepare("counts")
    encoded_key = output.encode_key("alpha")
    assert AvroDecoder(registry=mock_registry)(encoded_key) == "alpha"
    assert registry(mock_registry).get_latest_version("counts-key").schema.schema_str


def test_avro_part_files_are_identical_on_every_replay(tmp_path: Path) -> None:
    rows = [("beta", 2), ("alpha", 3)]
    parts = []
    for attempt in ("first", "replay"):
        sink = FileSink(tmp_path / attempt, avro_schema=V1)
        key = BatchKey("app", "counts", 1000, 0)
        sink.setup("app", "counts")
        assert sink.write(key, list(reversed(rows)) if attempt == "replay" else rows).rows == 2
        sink.commit("app", "counts", 1000, 1)
        parts.append(sink.part_path(key).read_bytes())
        assert sink.read_batch("counts", 1000) == [
            {"word": "alpha", "n": 3},
            {"word": "beta", "n": 2},
        ]
    assert parts[0] == parts[1]
    assert sink.part_path(key).name == "part-00000.avro"


BASE: dict[str, Any] = {
    "app_id": "wc",
    "job": "examples.wordcount:build",
    "kafka": {"bootstrap_servers": "127.0.0.1:1"},
}


def problems(tmp_path: Path, **changes: Any) -> list[str]:
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump({**BASE, **changes}))
    with pytest.raises(InvalidConfig) as caught:
        load_settings(path, {})
    return list(caught.value.problems)


def test_settings_refuse_avro_that_cannot_work(tmp_path: Path) -> None:
    (tmp_path / "bad.avsc").write_text('{"type": "no-such-type"}')
    (tmp_path / "good.avsc").write_text(V1)
    no_registry = problems(tmp_path, sources={"lines": {"topics": ["t"], "codec": "avro"}})
    assert any("sources.lines read or write Avro without a schema file" in p for p in no_registry)
    bad_file = problems(
        tmp_path,
        sources={
            "lines": {
                "topics": ["t"],
                "codec": "avro",
                "avro": {"writer_schema": str(tmp_path / "bad.avsc")},
            }
        },
    )
    assert any("is not a valid Avro schema" in p for p in bad_file)
    missing = problems(
        tmp_path,
        sinks={
            "out": {
                "type": "files",
                "path": "out",
                "format": "avro",
                "avro": {"schema_file": "nope.avsc"},
            }
        },
    )
    assert any("cannot read Avro schema file 'nope.avsc'" in p for p in missing)
    no_schema = problems(
        tmp_path, sinks={"out": {"type": "files", "path": "out", "format": "avro"}}
    )
    assert any("format avro needs avro.schema_file" in p for p in no_schema)


def test_registry_secrets_are_masked_and_revealed_only_to_the_client(tmp_path: Path) -> None:
    canary = "canary-registry-7f3a"
    path = tmp_path / "job.yaml"
    config = {
        **BASE,
        "schema_registry": {
            "url": "https://registry:8081",
            "basic_auth_user": "dstreams",
            "basic_auth_password": canary,
            "ssl_key_password": f"{canary}-key",
        },
    }
    path.write_text(yaml.safe_dump(config))
    settings = load_settings(path, {})
    assert canary not in json.dumps(settings.masked_dict())
    assert canary not in repr(settings)
    assert settings.schema_registry is not None
    conf = settings.schema_registry.client_config()
    assert conf["basic.auth.user.info"] == f"dstreams:{canary}"
    assert conf["ssl.key.password"] == f"{canary}-key"
