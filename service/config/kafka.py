"""Connection settings: the Kafka cluster, the schema registry, and the Avro schema files that
sources read and sinks write with.

Secrets are `SecretStr`, revealed only by `KafkaSettings.librdkafka_config()` and
`SchemaRegistrySettings.client_config()`, for the clients that need them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from pydantic import Field, PrivateAttr, SecretStr, field_validator, model_validator

from service.config.model import ConfigModel
from service.config.types import MANAGED_KAFKA_KEYS, ConfValue, raise_all, sensitive_keys
from service.errors import ConfigError

if TYPE_CHECKING:
    from connectors.avro import AvroDecoder, AvroOutput


class KafkaSettings(ConfigModel):
    bootstrap_servers: str = Field(min_length=1)
    """Comma-separated host:port list of brokers."""
    properties: dict[str, ConfValue] = Field(default_factory=dict)
    """Any librdkafka property (security.protocol, ssl.ca.location, sasl.mechanism, ...)."""
    secret_properties: dict[str, SecretStr] = Field(default_factory=dict)
    """librdkafka properties holding credentials (sasl.oauthbearer.client.secret, ...)."""
    sasl_password: SecretStr | None = None
    """Becomes librdkafka's sasl.password."""
    ssl_key_password: SecretStr | None = None
    """Becomes librdkafka's ssl.key.password."""
    # On by default, as in the chart: a production config cannot forget it. One-broker dev
    # setups (config/wordcount.yaml, the demo) turn it off explicitly.
    require_replication: bool = True
    """Refuse to start when a topic dstreams reads, writes or would create has fewer replicas
    than min_replication_factor or a lower min.insync.replicas than min_insync_replicas; false
    logs a warning and sets dstreams_topic_under_replicated instead."""
    min_replication_factor: int = Field(default=3, ge=1)
    """Fewest replicas each topic should have (checked at start-up)."""
    min_insync_replicas: int = Field(default=2, ge=1)
    """Lowest min.insync.replicas each topic should have (checked at start-up)."""

    @field_validator("properties")
    @classmethod
    def _plain_properties_only(cls, properties: dict[str, str]) -> dict[str, str]:
        problems = [
            f"{key!r} is managed by dstreams: {why}"
            for key, why in MANAGED_KAFKA_KEYS.items()
            if key in properties
        ]
        problems += sensitive_keys(properties, "kafka.secret_properties (or kafka.sasl_password)")
        raise_all(problems)
        return properties

    @model_validator(mode="after")
    def _reachable_minimum(self) -> KafkaSettings:
        consequence = "a topic that met both could never take a write"
        require_min_insync_within(self, "min_replication_factor", consequence)
        return self

    @model_validator(mode="after")
    def _one_place_per_secret(self) -> KafkaSettings:
        for field, key in (
            ("sasl_password", "sasl.password"),
            ("ssl_key_password", "ssl.key.password"),
        ):
            if getattr(self, field) is not None and key in self.secret_properties:
                msg = f"{key} is given twice, as kafka.{field} and in kafka.secret_properties"
                raise ValueError(msg)
        return self

    def librdkafka_config(self) -> dict[str, str]:
        """The client configuration with secrets revealed: pass it to librdkafka only."""
        conf = {"bootstrap.servers": self.bootstrap_servers, **self.properties}
        conf.update(
            {key: value.get_secret_value() for key, value in self.secret_properties.items()}
        )
        if self.sasl_password is not None:
            conf["sasl.password"] = self.sasl_password.get_secret_value()
        if self.ssl_key_password is not None:
            conf["ssl.key.password"] = self.ssl_key_password.get_secret_value()
        return conf


class _MinInsync(Protocol):
    min_insync_replicas: int


def require_min_insync_within(settings: _MinInsync, replicas_field: str, consequence: str) -> None:
    """Refuse a `settings.min_insync_replicas` above the replicas its topics have (the field
    `replicas_field`): `acks=all` could then never be met; `consequence` says what that means
    where it is set."""
    replicas: int = getattr(settings, replicas_field)
    if settings.min_insync_replicas > replicas:
        msg = (
            f"min_insync_replicas ({settings.min_insync_replicas}) exceeds {replicas_field} "
            f"({replicas}); {consequence}"
        )
        raise ValueError(msg)


class SchemaRegistrySettings(ConfigModel):
    url: str = Field(min_length=1)
    """http(s)://host:port of a Confluent-API schema registry (mock://NAME: confluent-kafka's
    in-process mock, for tests)."""
    basic_auth_user: str | None = None
    basic_auth_password: SecretStr | None = None
    """Masked when shown; with basic_auth_user, HTTP basic authentication."""
    ssl_ca_location: str | None = None
    """CA file that signed the registry's certificate (https)."""
    ssl_certificate_location: str | None = None
    ssl_key_location: str | None = None
    ssl_key_password: SecretStr | None = None

    @model_validator(mode="after")
    def _user_and_password_together(self) -> SchemaRegistrySettings:
        if (self.basic_auth_user is None) != (self.basic_auth_password is None):
            msg = "give both basic_auth_user and basic_auth_password, or neither"
            raise ValueError(msg)
        return self

    def client_config(self) -> dict[str, str]:
        """The registry client's settings with secrets revealed: pass them to the client only."""
        conf = {"url": self.url}
        if self.basic_auth_user is not None and self.basic_auth_password is not None:
            password = self.basic_auth_password.get_secret_value()
            conf["basic.auth.user.info"] = f"{self.basic_auth_user}:{password}"
        for key, value in (
            ("ssl.ca.location", self.ssl_ca_location),
            ("ssl.certificate.location", self.ssl_certificate_location),
            ("ssl.key.location", self.ssl_key_location),
        ):
            if value is not None:
                conf[key] = value
        if self.ssl_key_password is not None:
            conf["ssl.key.password"] = self.ssl_key_password.get_secret_value()
        return conf


def _schema_text(path: str | None) -> str | None:
    """The `.avsc` file at `path` as compact JSON, checked to be a valid Avro schema."""
    if path is None:
        return None
    from connectors.avro import read_schema_file

    try:
        return read_schema_file(path)
    except ConfigError as exc:
        raise ValueError(str(exc)) from None


class AvroReadSettings(ConfigModel):
    writer_schema: str | None = None
    """.avsc file the records were written with: plain Avro binary. None: the Confluent wire
    format, with writer schemas fetched by id from schema_registry."""
    reader_schema: str | None = None
    """.avsc file to read with (Avro schema resolution: added fields take their defaults, removed
    fields are dropped); none means records come as written."""
    _texts: tuple[str | None, str | None] = PrivateAttr(default=(None, None))

    @model_validator(mode="after")
    def _schemas_parse(self) -> AvroReadSettings:
        self._texts = (_schema_text(self.writer_schema), _schema_text(self.reader_schema))
        return self

    def decoder(self, registry: SchemaRegistrySettings | None) -> AvroDecoder:
        from connectors.avro import AvroDecoder

        writer, reader = self._texts
        if writer is not None:
            return AvroDecoder(writer_schema=writer, reader_schema=reader)
        if registry is None:
            msg = "Avro needs avro.writer_schema (plain Avro) or schema_registry (wire format)"
            raise ConfigError(msg)
        return AvroDecoder(reader_schema=reader, registry=registry.client_config())


class AvroWriteSettings(ConfigModel):
    schema_file: str | None = None
    """.avsc file of the values written. With schema_registry it must be registered under
    <topic>-value (or auto_register); none there means the subject's latest version."""
    key_schema_file: str | None = None
    """.avsc file of the keys (Kafka sink): keys are Avro only when this is given."""
    auto_register: bool = False
    """Register schema_file (and key_schema_file) under the topic's subjects at start-up; the
    registry refuses an incompatible schema and the service does not start."""
    _texts: tuple[str | None, str | None] = PrivateAttr(default=(None, None))

    @model_validator(mode="after")
    def _schemas_parse(self) -> AvroWriteSettings:
        self._texts = (_schema_text(self.schema_file), _schema_text(self.key_schema_file))
        return self

    @property
    def schema_text(self) -> str | None:
        return self._texts[0]

    def output(self, registry: SchemaRegistrySettings | None) -> AvroOutput:
        from connectors.avro import AvroOutput

        value, key = self._texts
        conf = registry.client_config() if registry is not None else None
        return AvroOutput(value, key, conf, self.auto_register)
