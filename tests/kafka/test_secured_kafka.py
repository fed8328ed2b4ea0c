"""The service against a secured Kafka: SASL_SSL with SCRAM-SHA-512, mutual TLS, and ACLs.

One secured local broker serves the session (`secured_kafka`). The word-count job writes to
Kafka, PostgreSQL and files as a user that holds only the ACLs the README lists
(`service_grants`), over SASL_SSL and over mutual TLS, and every sink holds the exact totals. Each
failure a person can make (a wrong password, an untrusted certificate, each missing ACL) stops the
driver at start-up with exit code 4 and one message naming the fix, with no traceback and no retry
loop. The passwords never appear in the log, `/status`, `/metrics` or `config show`.

Test setup and verification use the cluster's PLAINTEXT super-user listener.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from service.dev.kafka_cluster import LocalKafkaCluster
from service.dev.kafka_security import (
    SERVICE_USER,
    Grant,
    add_scram_user,
    grant,
    service_grants,
)
from service.dev.service_process import REPO_ROOT, ServiceProcess
from tests.chaos.conftest import (
    ChaosApp,
    _app_id,
    make_lines,
    pg_database,  # noqa: F401 - a fixture this module's tests use
    produce,
    word_totals,
)

# A refused start-up needs Python, the config and one round of admin requests: seconds. This
# bound only keeps a hang from lasting the whole pytest timeout.
REFUSAL_TIMEOUT_S = 90.0
EXIT_REFUSED = 4
LINES = 400


@dataclass
class SecureRun:
    app: ChaosApp
    kafka: dict[str, Any]
    secrets: tuple[str, ...]


def _secured_app(cluster: LocalKafkaCluster, app_id: str, dsn: str, workdir: Path) -> ChaosApp:
    # The harness (topic creation, verification) uses the PLAINTEXT super-user listener.
    app = ChaosApp(app_id, cluster.bootstrap_servers, dsn, workdir, rate_per_partition=None)
    app.journal_topic = f"{app_id}.journal"
    app.create_input()
    return app


def _all_grants(app: ChaosApp) -> list[Grant]:
    return service_grants(
        app.app_id, (app.input_topic,), (app.output_topic,), journal=app.journal_topic
    )


def _sasl_kafka(cluster: LocalKafkaCluster, user: str, password: str) -> dict[str, Any]:
    return {
        "bootstrap_servers": cluster.sasl_ssl_bootstrap_servers,
        "require_replication": False,
        "properties": cluster.security.sasl_ssl_properties(user),
        "sasl_password": password,
    }


def _mtls_kafka(cluster: LocalKafkaCluster, user: str = SERVICE_USER) -> dict[str, Any]:
    return {
        "bootstrap_servers": cluster.ssl_bootstrap_servers,
        "require_replication": False,
        "properties": cluster.security.mtls_properties(user),
        "ssl_key_password": cluster.security.tls_clients[user].key_password,
    }


@pytest.fixture
def secure_app(
    secured_kafka: LocalKafkaCluster,
    pg_database: str,  # noqa: F811 - the fixture imported above
    unique_name: str,
    tmp_path: Path,
) -> Iterator[ChaosApp]:
    app = _secured_app(secured_kafka, _app_id(unique_name), pg_database, tmp_path)
    try:
        yield app
    finally:
        app.kill_all()


# --- word count over the secured listeners --------------------------------------------------------


@pytest.mark.parametrize("listener", ["sasl_ssl", "mutual_tls"])
def test_word_count_exact_with_least_privilege(
    listener: str, secured_kafka: LocalKafkaCluster, secure_app: ChaosApp
) -> None:
    security = secured_kafka.security
    if listener == "sasl_ssl":
        kafka = _sasl_kafka(secured_kafka, SERVICE_USER, security.scram_passwords[SERVICE_USER])
        secret = security.scram_passwords[SERVICE_USER]
    else:
        kafka = _mtls_kafka(secured_kafka)
        secret = security.tls_clients[SERVICE_USER].key_password
    grant(secured_kafka.bootstrap_servers, f"User:{SERVICE_USER}", _all_grants(secure_app))
    lines = make_lines(seed=13, count=LINES)
    produce(secured_kafka.bootstrap_servers, secure_app.input_topic, [x.encode() for x in lines])

    driver = secure_app.service(kafka=kafka)
    driver.start()
    secure_app.wait_completed(driver)  # the journal topic exists from here on
    secure_app.wait_drained(driver)
    status = driver.get("/status") or b""
    metrics = driver.get("/metrics") or b""
    secure_app.stop(driver)

    secure_app.verify(word_totals(lines))
    shown = _config_show(driver.config_path)
    for where, text in (
        ("the log", driver.log_path.read_text()),
        ("/status", status.decode()),
        ("/metrics", metrics.decode()),
        ("config show", shown),
    ):
        assert secret not in text, f"the {listener} secret appears in {where}"
    assert status and metrics, "the driver served neither /status nor /metrics"
    assert "**********" in shown, "config show printed no masked secret at all"


def _config_show(config_path: Path) -> str:
    result = subprocess.run(
        [sys.executable, "-m", "service", "config", "show", "--config", str(config_path)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ},
    )
    assert result.returncode == 0, result.stderr
    return result.stdout + result.stderr


# --- refusals -----------------------------------------------


def _refusal(driver: ServiceProcess) -> str:
    """Runs `driver` to its end; asserts exit 4, one error line, no traceback; that line."""
    driver.start()
    code = driver.wait(REFUSAL_TIMEOUT_S)
    log = driver.log_path.read_text()
    assert code == EXIT_REFUSED, f"expected exit {EXIT_REFUSED}, got {code}:\n{driver.log_tail()}"
    assert "Traceback" not in log, f"a traceback was printed:\n{log}"
    refusals = [line for line in log.splitlines() if line.startswith("dstreams refused to start")]
    assert len(refusals) == 1, f"expected one refusal line:\n{log}"
    assert "rdkafka" not in log, f"librdkafka's retry log leaked into the output:\n{log}"
    return refusals[0]


def test_wrong_password_is_refused_with_the_setting_to_fix(
    secured_kafka: LocalKafkaCluster, secure_app: ChaosApp
) -> None:
    canary = "canary-password-0f3a9c"
    driver = secure_app.service(kafka=_sasl_kafka(secured_kafka, SERVICE_USER, canary))
    message = _refusal(driver)
    assert "KafkaAuthenticationError" in message
    assert repr(SERVICE_USER) in message and "kafka.sasl_password" in message
    assert canary not in driver.log_path.read_text()


@pytest.mark.parametrize("untrusted", ["broker_certificate", "client_certificate"])
def test_untrusted_certificate_is_refused(
    untrusted: str, secured_kafka: LocalKafkaCluster, secure_app: ChaosApp, tmp_path: Path
) -> None:
    # A CA of its own, which never signed the broker's certificate nor is trusted by the broker.
    from service.dev.kafka_security import ClusterSecurity

    stranger = ClusterSecurity(tmp_path / "stranger")
    stranger.prepare(users=(SERVICE_USER,))
    kafka = _mtls_kafka(secured_kafka)
    if untrusted == "broker_certificate":
        changed = {"ssl.ca.location": str(stranger.ca_certificate)}
    else:
        client = stranger.tls_clients[SERVICE_USER]
        changed = {
            "ssl.certificate.location": str(client.certificate),
            "ssl.key.location": str(client.key),
        }
        kafka["ssl_key_password"] = client.key_password
    kafka["properties"] = {**kafka["properties"], **changed}
    message = _refusal(secure_app.service(kafka=kafka))
    assert "KafkaTlsError" in message
    assert "ssl.ca.location" in message and "ssl.certificate.location" in message


def _without(grants: list[Grant], resource: str, operation: str, name: str) -> list[Grant]:
    return [
        g
        for g in grants
        if not (g.resource == resource and g.operation == operation and g.name == name)
    ]


@pytest.mark.parametrize(
    ("resource", "operation", "name_of", "fix"),
    [
        ("topic", "READ", "input", "--operation Read --topic"),
        ("group", "READ", "group", "--operation Read --group"),
        ("topic", "WRITE", "output", "--operation Write --topic"),
        ("topic", "CREATE", "journal", "--operation Create --topic"),
        ("transactional-id", "WRITE", "sink_txn", "--operation Write --transactional-id"),
        ("cluster", "DESCRIBE_CONFIGS", "cluster", "--operation DescribeConfigs --cluster"),
    ],
)
def test_each_missing_acl_is_refused_naming_it(
    resource: str,
    operation: str,
    name_of: str,
    fix: str,
    secured_kafka: LocalKafkaCluster,
    secure_app: ChaosApp,
) -> None:
    app = secure_app
    name = {
        "input": app.input_topic,
        "group": app.app_id,
        "output": app.output_topic,
        "journal": app.journal_topic,
        "sink_txn": f"dstreams.{app.app_id}.",
        "cluster": "kafka-cluster",
    }[name_of]
    user = f"u_{app.app_id}"
    password = add_scram_user(secured_kafka.bootstrap_servers, user)
    grants = _without(_all_grants(app), resource, operation, name)
    assert len(grants) == len(_all_grants(app)) - 1, "the ACL to leave out is not in the list"
    grant(secured_kafka.bootstrap_servers, f"User:{user}", grants)
    if name_of == "output":
        # An existing output topic: WRITE is checked on it (a missing one is checked for CREATE).
        from service.dev.brokers import create_topic

        create_topic(secured_kafka.bootstrap_servers, app.output_topic, 4)
    message = _refusal(app.service(kafka=_sasl_kafka(secured_kafka, user, password)))
    assert "KafkaAuthorizationError" in message, message
    assert f"User:{user}" in message and fix in message, message
    assert name in message or resource == "cluster", message


# --- what `dstreams dev kafka --secure` points to -----------------------------------------------


def test_client_files_hold_settings_and_keep_secrets_apart(
    secured_kafka: LocalKafkaCluster,
) -> None:
    import yaml

    from service.dev.kafka_security import write_client_files

    security = secured_kafka.security
    files = write_client_files(
        security, secured_kafka.sasl_ssl_bootstrap_servers, secured_kafka.ssl_bootstrap_servers
    )
    sasl = yaml.safe_load(files["sasl_ssl"].read_text())["kafka"]
    assert sasl["bootstrap_servers"] == secured_kafka.sasl_ssl_bootstrap_servers
    assert sasl["properties"]["security.protocol"] == "SASL_SSL"
    assert files["sasl_password"].read_text() == security.scram_passwords[SERVICE_USER]
    assert files["key_password"].read_text() == security.tls_clients[SERVICE_USER].key_password
    for secret_file in (files["sasl_password"], files["key_password"]):
        assert secret_file.stat().st_mode & 0o077 == 0, f"{secret_file} is readable by others"
    for snippet in (files["sasl_ssl"], files["mutual_tls"]):
        text = snippet.read_text()
        assert security.scram_passwords[SERVICE_USER] not in text
        assert security.tls_clients[SERVICE_USER].key_password not in text
