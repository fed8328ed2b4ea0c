"""A throw-away PKI for tests of TLS endpoints: a CA, a server certificate for 127.0.0.1 and a
client certificate, made with `cryptography` (present in the venv as a dependency of others)."""

from __future__ import annotations

import datetime
import ipaddress
from pathlib import Path
from typing import Any


def make_pki(directory: Path) -> dict[str, Path]:
    """PEM files in `directory`: ca, server, server-key, client, client-key."""
    authority = _certificate("test CA", None, ca=True)
    files = {"ca": _write_cert(directory / "ca.pem", authority[1])}
    for name in ("server", "client"):
        key, cert = _certificate(name, authority, ca=False)
        files[name] = _write_cert(directory / f"{name}.pem", cert)
        files[f"{name}-key"] = _write_key(directory / f"{name}-key.pem", key)
    return files


def _certificate(name: str, issuer: tuple[Any, Any] | None, *, ca: bool) -> tuple[Any, Any]:
    """A new key and its certificate, signed by `issuer` (key, certificate) or by itself."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    issuer_key, issuer_name = (issuer[0], issuer[1].subject) if issuer else (key, subject)
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if ca:
        usage = x509.KeyUsage(False, False, False, False, False, True, True, False, False)
        builder = builder.add_extension(usage, critical=True)
    else:
        purpose = (
            ExtendedKeyUsageOID.SERVER_AUTH if name == "server" else ExtendedKeyUsageOID.CLIENT_AUTH
        )
        builder = builder.add_extension(x509.ExtendedKeyUsage([purpose]), critical=False)
        address = x509.IPAddress(ipaddress.ip_address("127.0.0.1"))
        builder = builder.add_extension(x509.SubjectAlternativeName([address]), critical=False)
    return key, builder.sign(issuer_key, hashes.SHA256())


def _write_key(path: Path, key: Any) -> Path:
    from cryptography.hazmat.primitives import serialization

    encoding, pkcs8 = serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8
    path.write_bytes(key.private_bytes(encoding, pkcs8, serialization.NoEncryption()))
    return path


def _write_cert(path: Path, cert: Any) -> Path:
    from cryptography.hazmat.primitives import serialization

    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return path
