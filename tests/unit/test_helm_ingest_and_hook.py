"""The chart's ingest endpoint (`ingest.*`) and pre-upgrade check (`checkHook.*`), rendered.

Both run the driver's image with the release's config file and credentials; the ingest endpoint
is a Deployment and Service of its own that the driver's Service never selects, and the check is
a Job Helm runs before an upgrade with the new config.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from service.config.settings import load_settings
from tests.unit.test_helm_chart import (
    CHART,
    EXTRAS,
    FULL,
    KUBE_VERSION,
    RELEASE,
    STANDBY,
    _env,
    _matches,
    _merged,
    _run,
    _template,
    _tool,
    _write_values,
    kubeconform_command,
)

Docs = list[dict[str, Any]]

INGEST: dict[str, Any] = {
    "ingest": {
        "enabled": True,
        "tls": {"enabled": True, "secretName": "ingest-cert"},
        "tokens": {"enabled": True, "secretName": "ingest-tokens", "mountPath": "/var/run/tokens"},
        "extraArgs": ["--log-level", "debug"],
        "service": {"type": "LoadBalancer", "port": 443},
        "resources": {"requests": {"cpu": "2"}},
    },
    "config": {"ingest": {"port": 9443, "sources": ["lines"]}},
}
HOOK: dict[str, Any] = {"checkHook": {"enabled": True}}
EVERYTHING: dict[str, Any] = _merged(_merged(_merged(FULL, EXTRAS), INGEST), HOOK)


@pytest.fixture(scope="module")
def helm() -> str:
    found = _tool("helm")
    if found is None:
        pytest.skip("helm not found; `bash devtools/ensure-helm.sh` (run by `make sysdeps`)")
    return found


def _render(helm: str, tmp_path: Path, *layers: dict[str, Any]) -> Docs:
    args: list[str] = []
    for index, layer in enumerate(layers):
        args += ["-f", str(_write_values(tmp_path / f"values-{index}.yaml", layer))]
    result = _template(helm, *args)
    assert result.returncode == 0, result.stderr
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def _named(docs: Docs, kind: str, name: str) -> dict[str, Any]:
    (found,) = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    return found


def _pod_spec(workload: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = workload["spec"]["template"]["spec"]
    return spec


def _only_container(workload: dict[str, Any]) -> dict[str, Any]:
    (container,) = _pod_spec(workload)["containers"]
    return dict(container)


DRIVER, INGEST_NAME, CHECK = (
    f"{RELEASE}-dstreams",
    f"{RELEASE}-dstreams-ingest",
    f"{RELEASE}-dstreams-check",
)


@pytest.fixture(scope="module")
def kubeconform() -> list[str]:
    return kubeconform_command()


@pytest.fixture
def everything(helm: str, tmp_path: Path) -> Docs:
    return _render(helm, tmp_path, EVERYTHING)


# --- ingest -------------------------------------------------------------------------------------


def test_no_ingest_and_no_hook_by_default(helm: str, tmp_path: Path) -> None:
    names = {doc["metadata"]["name"] for doc in _render(helm, tmp_path)}
    assert INGEST_NAME not in names and CHECK not in names


def test_ingest_runs_the_endpoint_with_the_release_config(everything: Docs) -> None:
    deployment = _named(everything, "Deployment", INGEST_NAME)
    assert deployment["spec"]["replicas"] == 1
    assert deployment["spec"]["strategy"] == {"type": "Recreate"}  # never two endpoints at once
    container = _only_container(deployment)
    driver = _only_container(_named(everything, "Deployment", DRIVER))
    assert container["image"] == driver["image"]
    assert container["args"] == [
        "ingest", "--config", "/etc/dstreams/config.yaml", "--log-level", "debug",
    ]  # fmt: skip
    assert container["ports"] == [{"name": "ingest", "containerPort": 9443, "protocol": "TCP"}]
    # TLS is on in these values: the endpoint serves HTTPS only, and so do its probes.
    https = {"port": "ingest", "scheme": "HTTPS"}
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", **https}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", **https}
    assert container["startupProbe"]["httpGet"] == {"path": "/readyz", **https}
    assert container["resources"]["requests"] == {"cpu": "2", "memory": "512Mi"}  # merged
    assert container["securityContext"] == driver["securityContext"]
    config = {v["name"]: v for v in _pod_spec(deployment)["volumes"]}["config"]
    assert config == {"name": "config", "configMap": {"name": DRIVER}}
    # The driver's credentials and extra environment, the same Secret references.
    for name in (
        "DSTREAMS_KAFKA__SASL_PASSWORD",
        "DSTREAMS_SINKS__TABLE__DSN",
        "JAVA_TOOL_OPTIONS",
    ):
        assert _env(container)[name] == _env(driver)[name]
    assert container["envFrom"] == EXTRAS["envFrom"]


def test_ingest_mounts_its_tls_and_token_secrets_read_only_and_no_state(everything: Docs) -> None:
    deployment = _named(everything, "Deployment", INGEST_NAME)
    volumes = {v["name"]: v for v in _pod_spec(deployment)["volumes"]}
    mounts = {m["mountPath"]: m for m in _only_container(deployment)["volumeMounts"]}
    tls, tokens = mounts["/etc/dstreams/ingest-tls"], mounts["/var/run/tokens"]
    assert tls["readOnly"] is True and tokens["readOnly"] is True
    assert volumes[tls["name"]]["secret"]["secretName"] == "ingest-cert"
    assert volumes[tokens["name"]]["secret"]["secretName"] == "ingest-tokens"
    assert "state" not in volumes  # the journal volume stays the driver's (ReadWriteOnce)
    assert "kafka-ca" in volumes  # extraVolumes: the Kafka cluster's CA
    assert _pod_spec(deployment)["automountServiceAccountToken"] is False


def test_ingest_settings_name_the_mounted_tls_and_token_files(everything: Docs) -> None:
    container = _only_container(_named(everything, "Deployment", INGEST_NAME))
    env = {name: entry.get("value") for name, entry in _env(container).items()}
    assert env["DSTREAMS_INGEST__TLS__CERT_FILE"] == "/etc/dstreams/ingest-tls/tls.crt"
    assert env["DSTREAMS_INGEST__TLS__KEY_FILE"] == "/etc/dstreams/ingest-tls/tls.key"
    assert "DSTREAMS_INGEST__TLS__CLIENT_CA_FILE" not in env  # mutual TLS only when asked
    assert env["DSTREAMS_INGEST__AUTH__TOKENS_DIR"] == "/var/run/tokens"
    # The endpoint then serves HTTPS only, so the kubelet probes over HTTPS.
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        assert container[probe]["httpGet"]["scheme"] == "HTTPS"


def test_ingest_with_client_certificates_probes_the_port_only(helm: str, tmp_path: Path) -> None:
    tls = {"enabled": True, "secretName": "ingest-cert", "requireClientCertificates": True}
    docs = _render(helm, tmp_path, {"ingest": {"enabled": True, "tls": tls}})
    container = _only_container(_named(docs, "Deployment", INGEST_NAME))
    env = {name: entry.get("value") for name, entry in _env(container).items()}
    assert env["DSTREAMS_INGEST__TLS__CLIENT_CA_FILE"] == "/etc/dstreams/ingest-tls/ca.crt"
    # The kubelet has no client certificate: an HTTPS probe would fail its handshake.
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        assert container[probe]["tcpSocket"] == {"port": "ingest"}
        assert "httpGet" not in container[probe]


def test_ingest_without_tls_probes_plain_http(helm: str, tmp_path: Path) -> None:
    docs = _render(helm, tmp_path, {"ingest": {"enabled": True}})
    container = _only_container(_named(docs, "Deployment", INGEST_NAME))
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "ingest"}
    assert not [name for name in _env(container) if name.startswith("DSTREAMS_INGEST__")]


def test_ingest_secrets_are_optional(helm: str, tmp_path: Path) -> None:
    docs = _render(helm, tmp_path, {"ingest": {"enabled": True}})
    deployment = _named(docs, "Deployment", INGEST_NAME)
    assert {v["name"] for v in _pod_spec(deployment)["volumes"]} == {"config", "scratch"}
    assert _only_container(deployment)["ports"][0]["containerPort"] == 8081  # the config default


def test_ingest_service_and_budget_select_only_the_endpoint(everything: Docs) -> None:
    ingest_labels = _named(everything, "Deployment", INGEST_NAME)["spec"]["template"]["metadata"][
        "labels"
    ]
    driver_labels = _named(everything, "Deployment", DRIVER)["spec"]["template"]["metadata"][
        "labels"
    ]
    service = _named(everything, "Service", INGEST_NAME)["spec"]
    assert service["type"] == "LoadBalancer"
    assert service["ports"] == [
        {"name": "ingest", "port": 443, "targetPort": "ingest", "protocol": "TCP"}
    ]
    assert _matches(service["selector"], ingest_labels)
    assert not _matches(service["selector"], driver_labels)
    assert not _matches(_named(everything, "Service", DRIVER)["spec"]["selector"], ingest_labels)
    budget = _named(everything, "PodDisruptionBudget", INGEST_NAME)["spec"]
    assert _matches(budget["selector"]["matchLabels"], ingest_labels)
    assert not _matches(budget["selector"]["matchLabels"], driver_labels)
    assert budget["maxUnavailable"] == 1  # one replica: a drain is never blocked


def test_ingest_metrics_are_scraped_from_its_own_service(everything: Docs) -> None:
    monitor = _named(everything, "ServiceMonitor", INGEST_NAME)["spec"]
    service = _named(everything, "Service", INGEST_NAME)
    assert monitor["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert monitor["endpoints"][0]["port"] == service["spec"]["ports"][0]["name"]
    driver_monitor = _named(everything, "ServiceMonitor", DRIVER)["spec"]["selector"]
    assert not _matches(driver_monitor["matchLabels"], service["metadata"]["labels"])


def test_the_ingest_config_loads_in_dstreams(everything: Docs, tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(_named(everything, "ConfigMap", DRIVER)["data"]["config.yaml"])
    container = _only_container(_named(everything, "Deployment", INGEST_NAME))
    environ = {
        name: entry.get("value", f"from-secret-{name.lower()}")
        for name, entry in _env(container).items()
    }
    settings = load_settings(config, environ)
    port = _only_container(_named(everything, "Deployment", INGEST_NAME))["ports"][0]
    assert settings.ingest.port == port["containerPort"] == 9443
    assert settings.ingest.sources == ["lines"]


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"ingest": {"enabled": True, "replicas": 2}}, "a second replica would fence the first"),
        ({"ingest": {"enabled": True, "tls": {"enabled": True}}}, "ingest.tls.secretName"),
        ({"ingest": {"enabled": True, "tokens": {"enabled": True}}}, "ingest.tokens.secretName"),
        (
            {"ingest": {"enabled": True}, "config": {"ingest": {"port": 0}}},
            "config.ingest.port is 0",
        ),
        ({"config": {"http": {"port": 0}}}, "config.http.port is 0"),
    ],
    ids=["replicas", "tls-secret", "token-secret", "random-port", "random-http-port"],
)
def test_ingest_refuses_what_cannot_work(
    helm: str, tmp_path: Path, values: dict[str, Any], message: str
) -> None:
    result = _template(helm, "-f", str(_write_values(tmp_path / "values.yaml", values)))
    assert result.returncode != 0
    assert message in result.stderr


# --- the pre-upgrade check ----------------------------------------------------------------------


def test_the_check_runs_before_an_upgrade_with_the_drivers_image_env_and_volumes(
    everything: Docs,
) -> None:
    job = _named(everything, "Job", CHECK)
    assert job["metadata"]["annotations"]["helm.sh/hook"] == "pre-upgrade"
    assert job["spec"]["backoffLimit"] == 0
    assert _pod_spec(job)["restartPolicy"] == "Never"
    check = _only_container(job)
    driver_deployment = _named(everything, "Deployment", DRIVER)
    driver = _only_container(driver_deployment)
    assert check["args"] == ["check", "--config", "/etc/dstreams/config.yaml"]
    assert check["image"] == driver["image"]
    assert check["securityContext"] == driver["securityContext"]
    assert _env(check) == {
        name: entry for name, entry in _env(driver).items() if name != "SPARK_LOCAL_IP"
    }
    assert check["envFrom"] == driver["envFrom"]
    assert check["volumeMounts"] == driver["volumeMounts"]
    volumes = {v["name"]: v for v in _pod_spec(job)["volumes"]}
    driver_volumes = {v["name"]: v for v in _pod_spec(driver_deployment)["volumes"]}
    assert volumes.keys() == driver_volumes.keys()
    for name in volumes.keys() - {"config"}:
        assert volumes[name] == driver_volumes[name]
    # The new config, brought as a hook itself: the release's ConfigMap is still the old one.
    assert volumes["config"]["configMap"]["name"] == CHECK
    hook_config = _named(everything, "ConfigMap", CHECK)
    assert hook_config["metadata"]["annotations"]["helm.sh/hook"] == "pre-upgrade"
    assert int(hook_config["metadata"]["annotations"]["helm.sh/hook-weight"]) < int(
        job["metadata"]["annotations"]["helm.sh/hook-weight"]
    )
    driver_config = _named(everything, "ConfigMap", DRIVER)["data"]["config.yaml"]
    assert hook_config["data"]["config.yaml"] == driver_config


def test_the_check_goes_to_the_node_of_a_read_write_once_volume(helm: str, tmp_path: Path) -> None:
    docs = _render(helm, tmp_path, HOOK)
    affinity = _pod_spec(_named(docs, "Job", CHECK))["affinity"]["podAffinity"]
    (term,) = affinity["requiredDuringSchedulingIgnoredDuringExecution"]
    assert term["topologyKey"] == "kubernetes.io/hostname"
    driver_labels = _named(docs, "Deployment", DRIVER)["spec"]["template"]["metadata"]["labels"]
    assert _matches(term["labelSelector"]["matchLabels"], driver_labels)
    shared = _render(helm, tmp_path, HOOK, {"persistence": {"accessModes": ["ReadWriteMany"]}})
    assert "affinity" not in _pod_spec(_named(shared, "Job", CHECK))


def test_the_check_with_a_standby_and_kafka_journal(helm: str, tmp_path: Path) -> None:
    docs = _render(helm, tmp_path, STANDBY, HOOK)
    job = _named(docs, "Job", CHECK)
    assert {"name": "state", "emptyDir": {}} in _pod_spec(job)["volumes"]
    assert "affinity" not in _pod_spec(job)


# --- validity -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "values", [EVERYTHING, _merged(STANDBY, _merged(INGEST, HOOK))], ids=["full", "standby"]
)
def test_ingest_and_hook_render_valid_manifests(
    helm: str, kubeconform: list[str], tmp_path: Path, values: dict[str, Any]
) -> None:
    path = _write_values(tmp_path / "values.yaml", values)
    rendered = _template(helm, "-f", str(path))
    assert rendered.returncode == 0, rendered.stderr
    manifests = tmp_path / "manifests.yaml"
    manifests.write_text(rendered.stdout)
    result = _run(*kubeconform, str(manifests))
    assert result.returncode == 0, result.stdout + result.stderr
    lint = _run(
        helm, "lint", "--strict", str(CHART), "--kube-version", KUBE_VERSION, "-f", str(path)
    )
    assert lint.returncode == 0, lint.stdout + lint.stderr


@pytest.mark.parametrize(
    "typo",
    [
        "ingest.enable=true",
        "ingest.replica=1",
        "ingest.tls.secretname=x",
        "ingest.tokens.mountpath=/x",
        "ingest.probes.liveness.paht=/healthz",
        "ingest.service.prot=80",
        "checkHook.enable=true",
        "checkHook.activeDeadline=60",
        "probes.startup.failureTreshold=10",
        "metrics.prometheusRule.rules.lostOffsets.windw=5m",
        "metrics.prometheusRule.rules.checkpointAge.interval=3",
        "metrics.prometheusRule.rules.recoveryLoops.enabled=false",
    ],
)
def test_schema_rejects_typos_in_the_new_values(helm: str, typo: str) -> None:
    result = _template(helm, "--set", typo)
    assert result.returncode != 0
    assert "schema" in result.stderr.lower(), result.stderr


@pytest.mark.parametrize(
    "bad",
    [
        "ingest.replicas=0",
        "ingest.tls.mountPath=relative",
        "metrics.prometheusRule.rules.recoveryLoop.window=half-an-hour",
        "metrics.prometheusRule.rules.batchesBehind.batches=0",
    ],
)
def test_schema_rejects_wrong_values(helm: str, bad: str) -> None:
    result = _template(helm, "--set", bad)
    assert result.returncode != 0
    assert "schema" in result.stderr.lower(), result.stderr
