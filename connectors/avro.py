"""Avro values with fastavro: decoders for sources, encoders for sinks, and the schema registry.

Two framings, chosen by whether a schema registry is configured:

- **Confluent wire format** (with a registry): byte 0, then the writer schema's id as a 4-byte
  big-endian integer, then the Avro binary body. A decoder fetches each writer schema by id through
  `confluent_kafka.schema_registry` once per Python worker (`connectors.process_cache`); an encoder
  is given its schema id on the driver at start-up, so executors never call the registry to write.
- **Plain Avro binary** (no registry): the body alone, with the writer schema from an `.avsc` file.

A decoder may carry a reader schema: Avro schema resolution then fills added fields from their
defaults and drops removed ones. Decoders and encoders pickle as configuration (schema texts and the
registry's client settings); parsed schemas and clients are rebuilt in each process.
"""

from __future__ import annotations

import hashlib
import io
import json
import struct
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from connectors.codecs import DecodeError
from connectors.process_cache import ConfKey, ProcessCache, conf_key
from service.errors import ConfigError, DStreamsError

MAGIC_BYTE = 0
_HEADER = struct.Struct(">bI")  # magic byte, schema id
# fastavro raises these on a body that does not match its schema (truncated, bad varint, an
# index out of range, bytes that are not UTF-8 where a string is due).
_BODY_ERRORS = (EOFError, ValueError, IndexError, KeyError, UnicodeDecodeError, StopIteration)


class RegistryUnavailable(DStreamsError):
    """The schema registry could not answer; the task fails and Spark retries it."""


# --- schemas -----------------------------------------------------------------------------------


def read_schema_file(path: str | Path) -> str:
    """The schema in an `.avsc` file as canonical JSON text; `ConfigError` naming what is wrong."""
    file = Path(path)
    try:
        text = file.read_text()
    except OSError as exc:
        msg = f"cannot read Avro schema file {str(file)!r}: {exc.strerror}; expected an .avsc file"
        raise ConfigError(msg) from None
    return check_schema(text, f"Avro schema file {str(file)!r}")


def check_schema(text: str, where: str) -> str:
    """`text` if it is a valid Avro schema (as compact JSON), else `ConfigError` naming `where`."""
    try:
        schema = json.loads(text)
        parse(schema)
    except (ValueError, TypeError, KeyError) as exc:
        msg = f"{where} is not a valid Avro schema: {exc}"
        raise ConfigError(msg) from None
    return json.dumps(schema, separators=(",", ":"), sort_keys=True)


def parse(schema: Any) -> Any:
    import fastavro

    # A fresh name table per schema: two schemas may define the same record name differently.
    return fastavro.parse_schema(schema, named_schemas={})


def sync_marker(schema_text: str) -> bytes:
    """A container file's 16-byte sync marker, fixed per schema so a replay writes equal bytes."""
    return hashlib.sha256(b"dstreams-avro-sync:" + schema_text.encode()).digest()[:16]


# --- the registry ------------------------------------------------------------------------------


def _new_registry(conf: Mapping[str, str]) -> Any:
    from confluent_kafka.schema_registry import SchemaRegistryClient

    # new_client gives confluent-kafka's in-process mock for a mock:// URL (tests).
    return SchemaRegistryClient.new_client(dict(conf))


_REGISTRIES: ProcessCache[ConfKey, Any] = ProcessCache(close=lambda client: None)
_WRITER_SCHEMAS: dict[tuple[ConfKey, int], Any] = {}


def registry(conf: Mapping[str, str]) -> Any:
    """This process's client for the registry `conf` describes (one per configuration)."""
    return _REGISTRIES.get(conf_key(conf), lambda: _new_registry(conf))


def close_registries() -> None:
    _REGISTRIES.close_all()
    _WRITER_SCHEMAS.clear()


def fetch_writer_schema(conf: Mapping[str, str], schema_id: int) -> Any:
    """The parsed schema registered as `schema_id`, cached for the life of this process (a
    registered schema never changes). Unknown ids are `DecodeError`s; an unreachable registry is
    `RegistryUnavailable`, never a dead letter: the record may be fine."""
    from confluent_kafka.schema_registry.error import SchemaRegistryError

    key = (conf_key(conf), schema_id)
    cached = _WRITER_SCHEMAS.get(key)
    if cached is not None:
        return cached
    try:
        schema = registry(conf).get_schema(schema_id)
    except SchemaRegistryError as exc:
        if exc.http_status_code == 404:
            msg = f"unknown schema id {schema_id}: the registry has no such schema"
            raise DecodeError(msg) from None
        msg = f"the schema registry failed to return schema id {schema_id}: {exc}"
        raise RegistryUnavailable(msg) from exc
    except Exception as exc:  # requests/httpx errors: the registry is down or unreachable
        msg = f"the schema registry could not be reached for schema id {schema_id}: {exc}"
        raise RegistryUnavailable(msg) from exc
    if schema.schema_type not in (None, "AVRO"):
        msg = f"schema id {schema_id} is a {schema.schema_type} schema, not Avro"
        raise DecodeError(msg)
    parsed = _WRITER_SCHEMAS[key] = parse(json.loads(schema.schema_str))
    return parsed


# --- decoding ----------------------------------------------------------------------------------


class AvroDecoder:
    """A codec (see `connectors.codecs`): Avro bytes in, a dict (or the schema's value) out.

    With `registry` the bytes are in the Confluent wire format; otherwise they are a plain body
    written with `writer_schema`. `reader_schema` (optional) applies Avro schema resolution.
    """

    name = "avro"

    def __init__(
        self,
        *,
        writer_schema: str | None = None,
        reader_schema: str | None = None,
        registry: Mapping[str, str] | None = None,
    ) -> None:
        if (writer_schema is None) == (registry is None):
            msg = "an Avro decoder needs exactly one of a writer schema or a schema registry"
            raise ConfigError(msg)
        self.writer_schema = writer_schema
        self.reader_schema = reader_schema
        self.registry = dict(registry) if registry is not None else None
        self._parsed: dict[str | None, Any] = {}

    def __getstate__(self) -> dict[str, Any]:
        # Parsed schemas are rebuilt where the decoder runs.
        return {**self.__dict__, "_parsed": {}}

    def _schema(self, text: str | None) -> Any:
        if text is None:
            return None
        parsed = self._parsed.get(text)
        if parsed is None:
            parsed = self._parsed[text] = parse(json.loads(text))
        return parsed

    def __call__(self, raw: bytes | None) -> Any:
        if raw is None:
            return None
        if self.registry is None:
            return self._body(raw, 0, self._schema(self.writer_schema))
        if len(raw) < _HEADER.size:
            msg = f"truncated: {len(raw)} bytes, expected at least {_HEADER.size} (wire format)"
            raise DecodeError(msg)
        magic, schema_id = _HEADER.unpack_from(raw)
        if magic != MAGIC_BYTE:
            msg = f"bad magic byte {magic}: expected {MAGIC_BYTE} (Confluent wire format)"
            raise DecodeError(msg)
        return self._body(raw, _HEADER.size, fetch_writer_schema(self.registry, schema_id))

    def _body(self, raw: bytes, start: int, writer: Any) -> Any:
        import fastavro

        buffer = io.BytesIO(raw)
        buffer.seek(start)
        try:
            value = fastavro.schemaless_reader(buffer, writer, self._schema(self.reader_schema))
        except _BODY_ERRORS as exc:
            msg = f"invalid Avro body: {type(exc).__name__}: {exc}"
            raise DecodeError(msg) from None
        except fastavro.read.SchemaResolutionError as exc:
            msg = f"the writer schema cannot be read with the reader schema: {exc}"
            raise DecodeError(msg) from None
        left = len(raw) - buffer.tell()
        if left:
            msg = f"invalid Avro body: {left} bytes left after the record"
            raise DecodeError(msg)
        return value


# --- encoding ----------------------------------------------------------------------------------


class AvroEncoder:
    """Encodes one value with `schema`: the wire format when `schema_id` is known (a registry
    gave it), else a plain body. A tuple or list meets a record schema field by field."""

    def __init__(self, schema: str, schema_id: int | None = None) -> None:
        self.schema = schema
        self.schema_id = schema_id
        self._parsed: Any = None
        self._fields: list[str] | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_parsed": None, "_fields": None}

    def _prepare(self) -> Any:
        if self._parsed is None:
            schema = json.loads(self.schema)
            self._parsed = parse(schema)
            if isinstance(schema, dict) and schema.get("type") == "record":
                self._fields = [field["name"] for field in schema["fields"]]
        return self._parsed

    def as_datum(self, value: Any) -> Any:
        """`value` in the shape fastavro writes (a record from a tuple when the schema is one)."""
        self._prepare()
        if self._fields is not None and isinstance(value, tuple | list):
            if len(value) != len(self._fields):
                msg = f"a row of {len(value)} fields cannot fill record fields {self._fields}"
                raise ValueError(msg)
            return dict(zip(self._fields, value, strict=True))
        return value

    def __call__(self, value: Any) -> bytes:
        import fastavro

        schema = self._prepare()
        buffer = io.BytesIO()
        if self.schema_id is not None:
            buffer.write(_HEADER.pack(MAGIC_BYTE, self.schema_id))
        try:
            fastavro.schemaless_writer(buffer, schema, self.as_datum(value), strict=True)
        except (TypeError, KeyError, AttributeError) as exc:
            msg = f"value does not match the Avro schema: {type(exc).__name__}: {exc}"
            raise ValueError(msg) from None
        return buffer.getvalue()


def subject_for(topic: str, *, key: bool = False) -> str:
    """TopicNameStrategy: the subject of a topic's values (or keys)."""
    return f"{topic}-{'key' if key else 'value'}"


def writer_schema_for(
    conf: Mapping[str, str], subject: str, schema: str | None, auto_register: bool
) -> tuple[str, int]:
    """(schema text, id) an encoder writes `subject` with, decided once on the driver.

    With `schema` given it must be registered under `subject`: registered now when
    `auto_register`, else looked up. Without one, the subject's latest version is used. Any
    refusal is a `ConfigError` that says what to do, so a sink that cannot write never starts.
    """
    from confluent_kafka.schema_registry import Schema
    from confluent_kafka.schema_registry.error import SchemaRegistryError

    client = registry(conf)
    try:
        if schema is None:
            latest = client.get_latest_version(subject)
            return check_schema(latest.schema.schema_str, f"subject {subject!r}"), latest.schema_id
        if auto_register:
            return schema, int(client.register_schema(subject, Schema(schema, "AVRO")))
        return schema, int(client.lookup_schema(subject, Schema(schema, "AVRO")).schema_id)
    except SchemaRegistryError as exc:
        raise ConfigError(_refusal(subject, schema, auto_register, exc)) from None


def _refusal(subject: str, schema: str | None, auto_register: bool, exc: Any) -> str:
    status = exc.http_status_code
    if schema is None and status == 404:
        return (
            f"schema registry subject {subject!r} has no schema; register one or give the "
            "sink's avro.schema file"
        )
    if status == 409:
        return (
            f"the sink's Avro schema is incompatible with the versions registered under "
            f"{subject!r} ({exc.error_message}); change the schema or the subject's "
            "compatibility setting"
        )
    if status == 404 and not auto_register:
        return (
            f"the sink's Avro schema is not registered under {subject!r}; register it or set "
            "the sink's avro.auto_register: true"
        )
    return f"the schema registry refused subject {subject!r}: {exc}"


class AvroOutput:
    """How a Kafka sink writes Avro: values (and keys when a key schema is given) through encoders
    that `prepare` makes on the driver at start-up, asking the registry for schema ids if there
    is one. Pickles with its encoders, so executors never call the registry."""

    def __init__(
        self,
        value_schema: str | None,
        key_schema: str | None,
        registry: Mapping[str, str] | None,
        auto_register: bool,
    ) -> None:
        self.value_schema = value_schema
        self.key_schema = key_schema
        self.registry = dict(registry) if registry is not None else None
        self.auto_register = auto_register
        self.value: AvroEncoder | None = None
        self.key: AvroEncoder | None = None

    def prepare(self, topic: str) -> None:
        """Decides the schemas (and ids) written to `topic`; `ConfigError` if one cannot be."""
        self.value = self._encoder(topic, self.value_schema, key=False)
        if self.key_schema is not None:
            self.key = self._encoder(topic, self.key_schema, key=True)

    def _encoder(self, topic: str, schema: str | None, *, key: bool) -> AvroEncoder:
        if self.registry is None:
            if schema is None:
                msg = f"Avro output to {topic!r} has no schema file and no schema registry"
                raise ConfigError(msg)
            return AvroEncoder(schema)
        subject = subject_for(topic, key=key)
        text, schema_id = writer_schema_for(self.registry, subject, schema, self.auto_register)
        return AvroEncoder(text, schema_id)

    def encode_value(self, value: Any) -> bytes | None:
        if value is None:
            return None
        return self._ready(self.value)(value)

    def encode_key(self, key: Any) -> bytes | None:
        """`key` in Avro (only when a key schema was given; see `encodes_keys`)."""
        return None if key is None else self._ready(self.key)(key)

    @property
    def encodes_keys(self) -> bool:
        return self.key_schema is not None

    @staticmethod
    def _ready(encoder: AvroEncoder | None) -> AvroEncoder:
        if encoder is None:
            msg = "AvroOutput.prepare() was not called before writing"
            raise DStreamsError(msg)
        return encoder
