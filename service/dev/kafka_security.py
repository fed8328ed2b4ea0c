"""The secured mode of the local Kafka cluster: TLS material, SCRAM users and the authorizer.

`LocalKafkaCluster(secure=True)` asks `ClusterSecurity` for everything that differs from a plain
cluster (docs/architecture.md, Tests):

- a CA, a broker certificate (SAN `localhost` and `127.0.0.1`, so clients verify the host name)
  and a client certificate per mutual-TLS user, made with `openssl` in the cluster's directory;
- two client listeners per broker: `SSL` (mutual TLS: a client must show a certificate the CA
  signed; its CN is its principal) and `SASL_SSL` (SCRAM-SHA-512 users created when storage is
  formatted);
- the StandardAuthorizer: nothing is allowed without an ACL, except to the super users (the
  admin user, and `ANONYMOUS`, the principal of the loopback PLAINTEXT listener that the
  brokers, the controllers and the local test harness use among themselves).

Passwords are drawn at start from `secrets` and never written to a log; the client key is
encrypted with its own generated password, so `ssl.key.password` is exercised too.
"""

from __future__ import annotations

import secrets
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from service.dev.files import FileIn
from service.errors import DStreamsError

ADMIN_USER = "admin"
SERVICE_USER = "dstreams"
SCRAM_MECHANISM = "SCRAM-SHA-512"
# Certificates live for a test session or a demo; a day is plenty and keeps them throwaway.
_CERT_DAYS = "2"
# The CN of a client certificate becomes its principal (`User:<CN>`) through this rule, so a
# mutual-TLS user and a SCRAM user of the same name share their ACLs.
PRINCIPAL_MAPPING_RULES = "RULE:^CN=([^,]+).*$/$1/,DEFAULT"
STANDARD_AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"


class KafkaSecurityError(DStreamsError):
    """The TLS material or the users of a secured local cluster could not be made."""


@dataclass
class TlsClient:
    """A mutual-TLS client: its certificate, its encrypted key and the key's password."""

    name: str
    certificate: Path
    key: Path
    key_password: str


@dataclass
class ClusterSecurity:
    """TLS files and SCRAM users of one secured cluster; `prepare()` makes the files."""

    directory: Path
    scram_passwords: dict[str, str] = field(default_factory=dict)
    tls_clients: dict[str, TlsClient] = field(default_factory=dict)

    ca_certificate = FileIn("directory", "ca.crt")
    broker_keystore = FileIn("directory", "broker.pem")
    """The broker's private key and certificate in one PEM file (Kafka's PEM keystore)."""

    def prepare(self, users: tuple[str, ...] = (ADMIN_USER, SERVICE_USER)) -> None:
        """Make the CA, the broker's certificate, and a password and a certificate per user."""
        self.directory.mkdir(parents=True, exist_ok=True)
        self.directory.chmod(0o700)
        self._make_ca()
        self._make_broker_certificate()
        for user in users:
            self.scram_passwords[user] = secrets.token_hex(16)
            self.tls_clients[user] = self.make_client_certificate(user)

    # -- what the cluster needs --

    def format_arguments(self) -> list[str]:
        """`--add-scram` arguments for the storage tool: the SCRAM users exist from the start."""
        arguments: list[str] = []
        for user, password in self.scram_passwords.items():
            arguments += ["--add-scram", f"{SCRAM_MECHANISM}=[name={user},password={password}]"]
        return arguments

    def broker_settings(self) -> dict[str, object]:
        """Listener, TLS, SASL and authorizer settings to add to a broker's properties."""
        scram = SCRAM_MECHANISM.lower()
        return {
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": self.broker_keystore,
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": self.ca_certificate,
            "listener.name.ssl.ssl.client.auth": "required",
            "ssl.principal.mapping.rules": PRINCIPAL_MAPPING_RULES,
            "sasl.enabled.mechanisms": SCRAM_MECHANISM,
            f"listener.name.sasl_ssl.{scram}.sasl.jaas.config": (
                "org.apache.kafka.common.security.scram.ScramLoginModule required;"
            ),
            "authorizer.class.name": STANDARD_AUTHORIZER,
            "super.users": f"User:ANONYMOUS;User:{ADMIN_USER}",
            "allow.everyone.if.no.acl.found": "false",
        }

    # -- what a client needs --

    def sasl_ssl_properties(self, user: str = SERVICE_USER) -> dict[str, str]:
        """librdkafka properties for `user` over SASL_SSL, without the password."""
        return {
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": SCRAM_MECHANISM,
            "sasl.username": user,
            "ssl.ca.location": str(self.ca_certificate),
            "ssl.endpoint.identification.algorithm": "https",
        }

    def mtls_properties(self, user: str = SERVICE_USER) -> dict[str, str]:
        """librdkafka properties for `user` over mutual TLS, without the key's password."""
        client = self.tls_clients[user]
        return {
            "security.protocol": "SSL",
            "ssl.ca.location": str(self.ca_certificate),
            "ssl.certificate.location": str(client.certificate),
            "ssl.key.location": str(client.key),
            "ssl.endpoint.identification.algorithm": "https",
        }

    # -- openssl --

    def _make_ca(self) -> None:
        key = self.directory / "ca.key"
        _openssl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", key)
        _openssl(
            "req", "-x509", "-new", "-key", key, "-sha256", "-days", _CERT_DAYS,
            "-subj", "/CN=dstreams local CA", "-out", self.ca_certificate,
        )  # fmt: skip

    def _make_broker_certificate(self) -> None:
        key = self.directory / "broker.key"
        certificate = self.directory / "broker.crt"
        _openssl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", key)
        self._sign(key, certificate, "/CN=localhost", "subjectAltName=DNS:localhost,IP:127.0.0.1")
        # Kafka's PEM keystore: the unencrypted PKCS#8 key, then the certificate chain.
        self.broker_keystore.write_text(key.read_text() + certificate.read_text())
        self.broker_keystore.chmod(0o600)

    def make_client_certificate(self, user: str) -> TlsClient:
        """A client certificate with CN `user` signed by this CA, its key encrypted with a fresh
        password."""
        password = secrets.token_hex(16)
        key = self.directory / f"client-{user}.key"
        certificate = self.directory / f"client-{user}.crt"
        password_file = self.directory / f".client-{user}.pass"
        password_file.write_text(password)
        password_file.chmod(0o600)
        _openssl(
            "genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256",
            "-aes-256-cbc", "-pass", f"file:{password_file}", "-out", key,
        )  # fmt: skip
        self._sign(key, certificate, f"/CN={user}", "extendedKeyUsage=clientAuth", password_file)
        password_file.unlink()
        return TlsClient(user, certificate, key, password)

    def _sign(
        self,
        key: Path,
        certificate: Path,
        subject: str,
        extension: str,
        key_pass: Path | None = None,
    ) -> None:
        request = certificate.with_suffix(".csr")
        passin = ["-passin", f"file:{key_pass}"] if key_pass is not None else []
        _openssl("req", "-new", "-key", key, *passin, "-subj", subject, "-out", request)
        _openssl(
            "x509", "-req", "-in", request, "-CA", self.ca_certificate,
            "-CAkey", self.directory / "ca.key", "-CAcreateserial", "-days", _CERT_DAYS,
            "-sha256", "-extfile", _extension_file(self.directory, extension), "-out", certificate,
        )  # fmt: skip
        request.unlink()


def _extension_file(directory: Path, extension: str) -> Path:
    path = directory / "extension.cnf"
    path.write_text(extension + "\n")
    return path


def _openssl(*arguments: str | Path) -> None:
    openssl = shutil.which("openssl")
    if openssl is None:
        msg = (
            "a secured local Kafka cluster makes its certificates with `openssl`, but none was "
            "found on PATH; install it (Debian/Ubuntu: `apt-get install openssl`)"
        )
        raise KafkaSecurityError(msg)
    command = [openssl, *map(str, arguments)]
    result = subprocess.run(command, capture_output=True, text=True, check=False)  # noqa: S603
    if result.returncode != 0:
        msg = (
            f"expected `openssl {arguments[0]}` to make TLS material for the local Kafka cluster, "
            f"but it exited with {result.returncode}: {result.stderr.strip()[-500:]}"
        )
        raise KafkaSecurityError(msg)


# --- users and ACLs, through the cluster's super-user (PLAINTEXT) listener ----------------------


@dataclass(frozen=True)
class Grant:
    """One ALLOW ACL: `operation` on a resource, by literal name or by `prefixed` name."""

    resource: str  # "topic", "group", "transactional-id" or "cluster"
    name: str
    operation: str  # an AclOperation name: READ, WRITE, CREATE, DESCRIBE, ...
    prefixed: bool = False


def service_grants(
    app_id: str,
    inputs: tuple[str, ...],
    outputs: tuple[str, ...],
    journal: str | None = None,
    group: str | None = None,
) -> list[Grant]:
    """The least-privilege ACLs of a dstreams job (README, Running against a secured cluster).

    `inputs` are read; `outputs` (Kafka outputs, the dead-letter topic) are written and created
    when missing; the Kafka `journal` and the marker topics (by prefix) are also read back.
    DESCRIBE_CONFIGS on every topic serves the start-up replication check.
    """
    written = ("WRITE", "CREATE", "DESCRIBE_CONFIGS")
    grants = [Grant("topic", t, op) for t in inputs for op in ("READ", "DESCRIBE_CONFIGS")]
    grants.append(Grant("group", group or app_id, "READ"))
    grants += [Grant("topic", topic, op) for topic in outputs for op in written]
    if journal is not None:
        grants += [Grant("topic", journal, op) for op in ("READ", *written)]
    markers = f"dstreams.markers.{app_id}."  # grown (ALTER) when an output has more tasks
    grants += [Grant("topic", markers, op, prefixed=True) for op in ("READ", "ALTER", *written)]
    grants.append(Grant("transactional-id", f"dstreams.{app_id}.", "WRITE", prefixed=True))
    grants.append(Grant("transactional-id", f"dstreams-journal.{app_id}.", "WRITE", prefixed=True))
    # Kafka outputs check the brokers' transaction.max.timeout.ms at start-up.
    grants.append(Grant("cluster", "kafka-cluster", "DESCRIBE_CONFIGS"))
    return grants


def grant(admin_bootstrap: str, principal: str, grants: list[Grant]) -> None:
    """Create `grants` for `principal` (e.g. `User:dstreams`) and wait until they are in force."""
    from confluent_kafka.admin import (
        AclBinding,
        AclOperation,
        AclPermissionType,
        ResourcePatternType,
        ResourceType,
    )

    from connectors.kafka_client import new_admin_client

    types = {
        "topic": ResourceType.TOPIC,
        "group": ResourceType.GROUP,
        "transactional-id": ResourceType.TRANSACTIONAL_ID,
        "cluster": ResourceType.BROKER,
    }
    bindings = [
        AclBinding(
            types[g.resource],
            "kafka-cluster" if g.resource == "cluster" else g.name,
            ResourcePatternType.PREFIXED if g.prefixed else ResourcePatternType.LITERAL,
            principal,
            "*",
            AclOperation[g.operation],
            AclPermissionType.ALLOW,
        )
        for g in grants
    ]
    admin = new_admin_client({"bootstrap.servers": admin_bootstrap})
    for future in admin.create_acls(bindings, request_timeout=30).values():
        future.result(timeout=30)


def add_scram_user(admin_bootstrap: str, user: str) -> str:
    """Create (or reset) SCRAM-SHA-512 user `user` with a fresh password; the password."""
    from confluent_kafka.admin import (
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialUpsertion,
    )

    from connectors.kafka_client import new_admin_client

    password = secrets.token_hex(16)
    upsert = UserScramCredentialUpsertion(
        user, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), password.encode()
    )
    admin = new_admin_client({"bootstrap.servers": admin_bootstrap})
    for future in admin.alter_user_scram_credentials([upsert], request_timeout=30).values():
        future.result(timeout=30)
    return password


def write_client_files(
    security: ClusterSecurity, sasl_bootstrap: str, ssl_bootstrap: str, user: str = SERVICE_USER
) -> dict[str, Path]:
    """Config snippets (the `kafka:` section, secrets left out) and secret files (mode 0600) for
    `user` over SASL_SSL and over mutual TLS; what `dstreams dev kafka --secure` points to."""
    import yaml

    directory = security.directory
    files = {
        "sasl_ssl": directory / f"{user}-sasl-ssl.yaml",
        "mutual_tls": directory / f"{user}-mutual-tls.yaml",
        "sasl_password": directory / f"{user}.sasl-password",
        "key_password": directory / f"{user}.key-password",
    }
    sasl: dict[str, object] = {
        "bootstrap_servers": sasl_bootstrap,
        "properties": security.sasl_ssl_properties(user),
    }
    mtls: dict[str, object] = {
        "bootstrap_servers": ssl_bootstrap,
        "properties": security.mtls_properties(user),
    }
    for snippet in (sasl, mtls):
        # The local broker's topics have one replica: warn about them rather than refuse to start.
        snippet["require_replication"] = False
    files["sasl_ssl"].write_text(yaml.safe_dump({"kafka": sasl}, sort_keys=False))
    files["mutual_tls"].write_text(yaml.safe_dump({"kafka": mtls}, sort_keys=False))
    for key, secret in (
        ("sasl_password", security.scram_passwords[user]),
        ("key_password", security.tls_clients[user].key_password),
    ):
        files[key].touch(mode=0o600)
        files[key].write_text(secret)
    return files
