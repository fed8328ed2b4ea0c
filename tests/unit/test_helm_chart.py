"""The Helm chart: lint, render, and check what the rendered manifests promise.

One driver (1 replica, Recreate), probes on /healthz and /readyz, a locked-down pod, the config
file as given, and credentials only ever as Secret references. helm and kubeconform come from
`devtools/ensure-helm.sh` (run by `make sysdeps`); without helm these tests skip and say so.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from service.config.settings import load_settings
from service.observe.metrics import BATCH_OUTCOMES, Metrics

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "helm" / "dstreams"
TOOLS = Path(os.environ.get("DSTREAMS_TOOLS_CACHE", Path.home() / ".cache" / "dstreams"))
KUBE_VERSION = os.environ.get("DSTREAMS_KUBE_VERSION", "1.34.0")
RELEASE = "demo"
NAMESPACE = "streams"
# Would be a real password if a value leaked: none of these strings may reach any manifest.
CANARY = "canary-Pa55w0rd-7f3e"
CANARY_DSN = f"postgresql://dstreams:{CANARY}@db:5432/app"

Render = Callable[..., list[dict[str, Any]]]


def _tool(name: str) -> str | None:
    cached = TOOLS / "bin" / name
    if cached.is_file() and os.access(cached, os.X_OK):
        return str(cached)
    return shutil.which(name)


@pytest.fixture(scope="module")
def helm() -> str:
    found = _tool("helm")
    if found is None:
        pytest.skip(
            f"helm not found in {TOOLS / 'bin'} or on PATH; `bash devtools/ensure-helm.sh` "
            "(run by `make sysdeps`) builds it"
        )
    return found


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, capture_output=True, text=True, timeout=120, check=False)


def _write_values(path: Path, values: dict[str, Any]) -> Path:
    # JSON, not yaml.safe_dump: Helm reads YAML 1.1, where a bare n or y would become a boolean.
    path.write_text(json.dumps(values))
    return path


def _merged(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    """Helm's merge of values: maps key by key, anything else replaced."""
    out = dict(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merged(out[key], value)
        else:
            out[key] = value
    return out


CHART_DEFAULTS: dict[str, Any] = yaml.safe_load((CHART / "values.yaml").read_text())
EXAMPLE_VALUES = CHART / "examples" / "wordcount-values.yaml"


def _template(helm: str, *args: str) -> subprocess.CompletedProcess[str]:
    return _run(
        helm, "template", RELEASE, str(CHART), "--namespace", NAMESPACE,
        "--kube-version", KUBE_VERSION, *args,
    )  # fmt: skip


@pytest.fixture
def render(helm: str, tmp_path: Path) -> Render:
    """`helm template` with the given values dicts (later ones win); the parsed documents."""

    def _render(*values: dict[str, Any]) -> list[dict[str, Any]]:
        args: list[str] = []
        for index, layer in enumerate(values):
            args += ["-f", str(_write_values(tmp_path / f"values-{index}.yaml", layer))]
        result = _template(helm, *args)
        assert result.returncode == 0, result.stderr
        return [doc for doc in yaml.safe_load_all(result.stdout) if doc]

    return _render


def _one(docs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    """The one document of `kind`; the Grafana dashboard's ConfigMap is not the config's."""
    found = [
        doc
        for doc in docs
        if doc["kind"] == kind and not doc["metadata"]["name"].endswith("-dashboard")
    ]
    assert len(found) == 1, f"expected one {kind}, found {len(found)}"
    return found[0]


def _pod(docs: list[dict[str, Any]]) -> dict[str, Any]:
    spec: dict[str, Any] = _one(docs, "Deployment")["spec"]["template"]["spec"]
    return spec


def _pod_annotations(docs: list[dict[str, Any]]) -> dict[str, str]:
    annotations: dict[str, str] = _one(docs, "Deployment")["spec"]["template"]["metadata"][
        "annotations"
    ]
    return annotations


def _container(docs: list[dict[str, Any]]) -> dict[str, Any]:
    (container,) = _pod(docs)["containers"]
    return dict(container)


def _env(container: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {entry["name"]: entry for entry in container.get("env", [])}


# Everything optional switched on, secrets by reference, and numbers YAML tools like to mangle.
FULL: dict[str, Any] = {
    "config": {
        "app_id": "orders",
        "job": "examples.wordcount:build",
        "batch_interval_ms": 2000,
        "kafka": {
            "bootstrap_servers": "broker-0:9093,broker-1:9093",
            "properties": {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512"},
        },
        "sources": {
            "lines": {
                "topics": ["lines"],
                # Millisecond timestamps are far above 1e6; they must survive rendering as ints.
                "starting_offsets": 1_767_225_600_000,
                "max_rate_per_partition": 2_500_000,
            }
        },
        "sinks": {
            "counts": {"type": "kafka", "topic": "counts"},
            "table": {"type": "postgres", "table": "counts", "columns": ["word", "n"]},
        },
        "journal": {"type": "file", "path": "/var/lib/dstreams/journal"},
        "checkpoint": {"path": "/var/lib/dstreams/checkpoints"},
        "http": {"port": 9090},
    },
    "env": {"DSTREAMS_LOGGING__LEVEL": "DEBUG", "DSTREAMS_DEFAULT_PARTITIONS": 8},
    "secrets": {
        "secretName": "orders-credentials",
        "kafkaSaslPassword": {"enabled": True, "key": "sasl"},
        "sinkDsns": {"table": {"secretName": "orders-db", "key": "dsn"}},
        "extra": {"DSTREAMS_KAFKA__SSL_KEY_PASSWORD": {"key": "ssl-key"}},
    },
    "persistence": {"existingClaim": "orders-journal"},
    "terminationGracePeriodSeconds": 300,
    "metrics": {
        "podAnnotations": False,
        "serviceMonitor": {"enabled": True, "labels": {"release": "prom"}},
        "prometheusRule": {"enabled": True},
        "grafanaDashboard": {"enabled": True, "annotations": {"grafana_folder": "Streaming"}},
    },
}


# Spark's executors as pods of their own, with a volume every pod can mount.
KUBERNETES: dict[str, Any] = {
    "spark": {"mode": "kubernetes", "kubernetes": {"executors": 3, "executorMemory": "2g"}},
    "persistence": {"accessModes": ["ReadWriteMany"], "storageClass": "nfs"},
    "config": {
        "sinks": {"out": {"type": "files", "path": "/var/lib/dstreams/out"}},
        "spark": {"conf": {"spark.sql.shuffle.partitions": "8"}},
    },
}


@pytest.fixture
def defaults(render: Render) -> list[dict[str, Any]]:
    return render()


@pytest.fixture
def on_kubernetes(render: Render) -> list[dict[str, Any]]:
    return render(KUBERNETES)


@pytest.fixture
def full(render: Render) -> list[dict[str, Any]]:
    return render(FULL)


# --- helm lint ------------------------------------------------------------------------------


def test_lint_strict_passes_with_defaults_and_with_everything_on(helm: str, tmp_path: Path) -> None:
    values = _write_values(tmp_path / "full.yaml", FULL)
    kubernetes = _write_values(tmp_path / "kubernetes.yaml", KUBERNETES)
    for extra in ([], ["-f", str(values)], ["-f", str(EXAMPLE_VALUES)], ["-f", str(kubernetes)]):
        result = _run(helm, "lint", "--strict", str(CHART), "--kube-version", KUBE_VERSION, *extra)
        assert result.returncode == 0, result.stdout + result.stderr


# --- one driver -----------------------------------------------------------------------------


def test_exactly_one_driver_replaced_by_recreate(defaults: list[dict[str, Any]]) -> None:
    spec = _one(defaults, "Deployment")["spec"]
    assert spec["replicas"] == 1
    assert spec["strategy"] == {"type": "Recreate"}


def test_replicas_is_not_a_value(helm: str) -> None:
    result = _template(helm, "--set", "replicas=2")
    assert result.returncode != 0
    assert "replicas" in result.stderr


STANDBY = {
    "standby": {"enabled": True},
    "persistence": {"enabled": False},
    "config": {"journal": {"type": "kafka", "topic": "journal"}},
}


def test_standby_runs_a_second_driver_that_waits(render: Render, helm: str, tmp_path: Path) -> None:
    docs = render(STANDBY)
    assert _one(docs, "Deployment")["spec"]["replicas"] == 2
    assert _container(docs)["args"][-1] == "--standby"
    values = _write_values(tmp_path / "standby.yaml", STANDBY)
    lint = _run(
        helm, "lint", "--strict", str(CHART), "--kube-version", KUBE_VERSION, "-f", str(values)
    )
    assert lint.returncode == 0, lint.stdout + lint.stderr


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"config": {"journal": {"type": "file"}}}, "needs config.journal.type kafka"),
        ({"persistence": {"enabled": True}}, "both driver pods mount the volume"),
        ({"spark": {"mode": "kubernetes"}}, "spark.mode local only"),
    ],
)
def test_standby_refuses_what_two_driver_pods_cannot_share(
    helm: str, tmp_path: Path, values: dict[str, Any], message: str
) -> None:
    # Each case replaces one of STANDBY's top-level keys whole: a file journal must not keep the
    # Kafka journal's topic, which the config's schema would refuse before the chart's check.
    path = _write_values(tmp_path / "values.yaml", {**STANDBY, **values})
    result = _template(helm, "-f", str(path))
    assert result.returncode != 0
    assert message in result.stderr


# --- probes, ports, lifecycle ---------------------------------------------------------------


def test_probes_hit_healthz_and_readyz_on_the_http_port(defaults: list[dict[str, Any]]) -> None:
    container = _container(defaults)
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    startup = container["startupProbe"]
    # Not /healthz, which is 200 as soon as the server is up: liveness would then apply during
    # recovery. /startupz turns 200 with the first batch after recovery (service/observe/http.py).
    assert startup["httpGet"] == {"path": "/startupz", "port": "http"}
    # Spark's start plus recovery: at least thirty minutes before liveness takes over.
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 1800
    assert container["ports"] == [{"name": "http", "containerPort": 8080, "protocol": "TCP"}]


def test_http_port_follows_the_config(full: list[dict[str, Any]]) -> None:
    assert _container(full)["ports"][0]["containerPort"] == 9090
    service = _one(full, "Service")
    assert service["spec"]["ports"][0]["targetPort"] == "http"


def test_image_entrypoint_is_kept_and_config_file_is_passed(
    defaults: list[dict[str, Any]],
) -> None:
    container = _container(defaults)
    # Only args: the image's exec-form ENTRYPOINT must stay PID 1's child chain, not a shell.
    assert "command" not in container
    assert container["args"] == ["run", "--config", "/etc/dstreams/config.yaml"]
    assert container["image"] == "dstreams:0.1.0"


def test_grace_period_comes_from_values(
    defaults: list[dict[str, Any]], full: list[dict[str, Any]]
) -> None:
    def grace(docs: list[dict[str, Any]]) -> int:
        return int(_pod(docs)["terminationGracePeriodSeconds"])

    assert grace(defaults) == 120
    assert grace(full) == 300


def test_no_service_links_that_would_become_dstreams_settings(
    defaults: list[dict[str, Any]],
) -> None:
    # A Service named "dstreams" would otherwise inject DSTREAMS_PORT=tcp://..., an unknown key.
    assert _pod(defaults)["enableServiceLinks"] is False


def test_config_change_restarts_the_driver(render: Render) -> None:
    def checksum(docs: list[dict[str, Any]]) -> str:
        return _pod_annotations(docs)["checksum/config"]

    assert checksum(render()) != checksum(render({"config": {"batch_interval_ms": 5000}}))


# --- security -------------------------------------------------------------------------------


def test_pod_runs_locked_down(defaults: list[dict[str, Any]]) -> None:
    pod = _pod(defaults)
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] == 10001
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert pod["automountServiceAccountToken"] is False
    context = _container(defaults)["securityContext"]
    assert context["runAsNonRoot"] is True
    assert context["readOnlyRootFilesystem"] is True
    assert context["allowPrivilegeEscalation"] is False
    assert context["capabilities"] == {"drop": ["ALL"]}


def test_writable_paths_are_volumes(defaults: list[dict[str, Any]]) -> None:
    pod = _pod(defaults)
    mounts = {m["mountPath"]: m["name"] for m in _container(defaults)["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes[mounts["/etc/dstreams"]]["configMap"]["name"] == f"{RELEASE}-dstreams"
    assert "emptyDir" in volumes[mounts["/tmp"]]
    state = volumes[mounts["/var/lib/dstreams"]]
    assert state["persistentVolumeClaim"]["claimName"] == f"{RELEASE}-dstreams"
    env = _env(_container(defaults))
    assert env["SPARK_LOCAL_DIRS"]["value"].startswith("/tmp/")


# --- config ---------------------------------------------------------------------------------


def _config_file(docs: list[dict[str, Any]]) -> dict[str, Any]:
    data = yaml.safe_load(_one(docs, "ConfigMap")["data"]["config.yaml"])
    assert isinstance(data, dict)
    return data


def test_configmap_holds_the_config_as_given(full: list[dict[str, Any]]) -> None:
    assert _config_file(full) == _merged(CHART_DEFAULTS["config"], FULL["config"])
    assert _config_file(full)["sinks"]["table"]["columns"] == ["word", "n"]


def test_defaults_add_no_source_or_sink_to_a_release(defaults: list[dict[str, Any]]) -> None:
    # Helm merges maps, so a default sink would join every release's own sinks unasked.
    config = _config_file(defaults)
    assert config["sources"] == {}
    assert config["sinks"] == {}


def test_default_config_keeps_state_on_the_volume(defaults: list[dict[str, Any]]) -> None:
    config = _config_file(defaults)
    assert config["journal"]["path"].startswith("/var/lib/dstreams/")
    assert config["checkpoint"]["path"].startswith("/var/lib/dstreams/")


def test_rendered_config_and_env_load_in_dstreams(
    full: list[dict[str, Any]], tmp_path: Path
) -> None:
    """The pod's config file and environment (secrets filled in) pass dstreams' own checks."""
    config = tmp_path / "config.yaml"
    config.write_text(_one(full, "ConfigMap")["data"]["config.yaml"])
    environ = {
        name: entry.get("value", f"from-secret-{name.lower()}")
        for name, entry in _env(_container(full)).items()
    }
    settings = load_settings(config, environ)
    assert settings.app_id == "orders"
    assert settings.default_partitions == 8
    assert settings.http.port == 9090
    assert settings.kafka.sasl_password is not None
    table = settings.sinks["table"]
    assert table.type == "postgres"
    assert table.dsn.get_secret_value() == "from-secret-dstreams_sinks__table__dsn"
    assert settings.sources["lines"].starting_offsets == 1_767_225_600_000
    assert settings.kafka.require_replication is True  # the chart's default, kept by the merge


def test_wordcount_example_values_load_in_dstreams(helm: str, tmp_path: Path) -> None:
    result = _template(helm, "-f", str(EXAMPLE_VALUES))
    assert result.returncode == 0, result.stderr
    docs = [doc for doc in yaml.safe_load_all(result.stdout) if doc]
    config = tmp_path / "config.yaml"
    config.write_text(_one(docs, "ConfigMap")["data"]["config.yaml"])
    settings = load_settings(config, {})
    assert set(settings.sources) == {"lines"}
    assert set(settings.sinks) == {"counts"}
    assert settings.journal.path == "/var/lib/dstreams/journal"
    # The example passes the chart's replication requirement: its sink topic gets 3 replicas.
    assert settings.kafka.require_replication is True
    assert settings.sinks["counts"].replication_factor >= settings.kafka.min_replication_factor


# --- replication ----------------------------------------------------------------------------


def test_replication_is_required_by_default(defaults: list[dict[str, Any]], tmp_path: Path) -> None:
    config = _config_file(defaults)
    assert config["kafka"]["require_replication"] is True
    path = tmp_path / "config.yaml"
    path.write_text(_one(defaults, "ConfigMap")["data"]["config.yaml"])
    kafka = load_settings(path, {}).kafka
    assert kafka.require_replication is True
    assert (kafka.min_replication_factor, kafka.min_insync_replicas) == (3, 2)


def test_a_release_can_turn_the_requirement_off(render: Render) -> None:
    docs = render({"config": {"kafka": {"require_replication": False}}})
    kafka = _config_file(docs)["kafka"]
    assert kafka["require_replication"] is False
    assert kafka["bootstrap_servers"] == "kafka:9092"  # merged, not replaced


def test_the_requirement_must_be_a_boolean(helm: str) -> None:
    result = _template(helm, "--set-string", "config.kafka.require_replication=yes")
    assert result.returncode != 0
    assert "require_replication" in result.stderr


# --- secrets --------------------------------------------------------------------------------


def test_credentials_arrive_only_through_secret_refs(full: list[dict[str, Any]]) -> None:
    env = _env(_container(full))
    expected = {
        "DSTREAMS_KAFKA__SASL_PASSWORD": ("orders-credentials", "sasl"),
        "DSTREAMS_SINKS__TABLE__DSN": ("orders-db", "dsn"),
        "DSTREAMS_KAFKA__SSL_KEY_PASSWORD": ("orders-credentials", "ssl-key"),
    }
    for name, (secret, key) in expected.items():
        assert "value" not in env[name]
        assert env[name]["valueFrom"] == {"secretKeyRef": {"name": secret, "key": key}}
    for name, entry in env.items():
        if re.search("PASSWORD|SECRET|DSN|TOKEN", name):
            assert "secretKeyRef" in entry.get("valueFrom", {}), name
    assert not [doc for doc in full if doc["kind"] == "Secret"]


@pytest.mark.parametrize(
    ("values", "named"),
    [
        ({"config": {"kafka": {"sasl_password": CANARY}}}, "config.kafka.sasl_password"),
        ({"config": {"kafka": {"ssl_key_password": CANARY}}}, "config.kafka.ssl_key_password"),
        (
            {"config": {"kafka": {"secret_properties": {"sasl.oauthbearer.token": CANARY}}}},
            "config.kafka.secret_properties",
        ),
        ({"config": {"spark": {"secret_conf": {"spark.ssl.keyPassword": CANARY}}}}, "secret_conf"),
        (
            {
                "config": {
                    "sinks": {
                        "db": {
                            "type": "postgres",
                            "table": "t",
                            "columns": ["a"],
                            "dsn": CANARY_DSN,
                        }
                    }
                }
            },
            "config.sinks.db.dsn",
        ),
        ({"env": {"DSTREAMS_KAFKA__SASL_PASSWORD": CANARY}}, "DSTREAMS_KAFKA__SASL_PASSWORD"),
        ({"extraEnv": [{"name": "PGPASSWORD", "value": CANARY}]}, "PGPASSWORD"),
    ],
)
def test_plain_text_credentials_are_refused(
    helm: str, tmp_path: Path, values: dict[str, Any], named: str
) -> None:
    result = _template(helm, "-f", str(_write_values(tmp_path / "leak.yaml", values)))
    assert result.returncode != 0, "a credential in values rendered without complaint"
    assert named in result.stderr
    assert CANARY not in result.stdout
    assert CANARY not in result.stderr


def test_secret_reference_needs_a_secret_name(helm: str) -> None:
    result = _template(helm, "--set", "secrets.kafkaSaslPassword.enabled=true")
    assert result.returncode != 0
    assert "secrets.kafkaSaslPassword" in result.stderr


def test_dsn_reference_must_name_a_configured_sink(helm: str) -> None:
    result = _template(helm, "--set", "secrets.sinkDsns.nosuch.key=k,secrets.secretName=s")
    assert result.returncode != 0
    assert "no sink nosuch" in result.stderr


# --- persistence ----------------------------------------------------------------------------


def test_default_creates_a_claim_kept_on_uninstall(defaults: list[dict[str, Any]]) -> None:
    claim = _one(defaults, "PersistentVolumeClaim")
    assert claim["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    assert claim["spec"]["accessModes"] == ["ReadWriteOnce"]


def test_existing_claim_is_mounted_and_none_created(full: list[dict[str, Any]]) -> None:
    assert not [doc for doc in full if doc["kind"] == "PersistentVolumeClaim"]
    volumes = _pod(full)["volumes"]
    claims = [
        v["persistentVolumeClaim"]["claimName"] for v in volumes if "persistentVolumeClaim" in v
    ]
    assert claims == ["orders-journal"]


def test_without_persistence_state_is_scratch(render: Render) -> None:
    docs = render({"persistence": {"enabled": False}})
    assert not [doc for doc in docs if doc["kind"] == "PersistentVolumeClaim"]
    volumes = {v["name"]: v for v in _pod(docs)["volumes"]}
    assert volumes["state"] == {"name": "state", "emptyDir": {}}


# --- monitoring -----------------------------------------------------------------------------


def test_defaults_scrape_by_annotation_and_need_no_operator(defaults: list[dict[str, Any]]) -> None:
    kinds = {doc["kind"] for doc in defaults}
    assert kinds == {"ConfigMap", "Deployment", "Service", "PersistentVolumeClaim"}
    annotations = _pod_annotations(defaults)
    assert annotations["prometheus.io/scrape"] == "true"
    assert annotations["prometheus.io/port"] == "8080"
    assert annotations["prometheus.io/path"] == "/metrics"


def test_service_monitor_selects_the_service(full: list[dict[str, Any]]) -> None:
    monitor = _one(full, "ServiceMonitor")
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert monitor["metadata"]["labels"]["release"] == "prom"
    service = _one(full, "Service")
    selector = monitor["spec"]["selector"]["matchLabels"]
    assert selector.items() <= service["metadata"]["labels"].items()
    assert monitor["spec"]["endpoints"][0]["port"] == service["spec"]["ports"][0]["name"]
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": [NAMESPACE]}
    # Annotations are off here, so Prometheus does not scrape the pod twice.
    assert "prometheus.io/scrape" not in _pod_annotations(full)


def test_prometheus_rules_use_the_service_metric_names(full: list[dict[str, Any]]) -> None:
    # The families the service really exposes, from its own registry ("# TYPE <name> <type>").
    exposed = set(re.findall(r"^# TYPE (\S+) ", Metrics().exposition().decode(), re.MULTILINE))
    rules = {
        rule["alert"]: rule
        for group in _one(full, "PrometheusRule")["spec"]["groups"]
        for rule in group["rules"]
    }
    assert set(rules) == {
        "DStreamsBatchesFailing",
        "DStreamsSchedulingDelayGrowing",
        "DStreamsNoBatchCompleted",
        "DStreamsConsumerLagHigh",
        "DStreamsOffsetsLost",
        "DStreamsDeadLetters",
        "DStreamsDecodeErrors",
        "DStreamsTopicUnderReplicated",
        "DStreamsCheckpointOld",
        "DStreamsBatchesBehind",
        "DStreamsRecoveryLoop",
        "DStreamsStateLarge",
    }
    assert 'outcome="failed"' in rules["DStreamsBatchesFailing"]["expr"]
    assert "failed" in BATCH_OUTCOMES
    for rule in rules.values():
        assert f'namespace="{NAMESPACE}"' in rule["expr"]
        assert "{{" not in rule["expr"]  # Helm rendered; only Prometheus templates remain
        for metric in re.findall(r"\bdstreams_[a-z_]+", rule["expr"]):
            family = re.sub(r"_(sum|count|bucket)$", "", metric)
            assert family in exposed, f"{rule['alert']} uses {metric}, which dstreams lacks"
    assert "{{ $labels.pod }}" in rules["DStreamsConsumerLagHigh"]["annotations"]["description"]


def exported_series() -> set[str]:
    """Every series name the service's registry can expose, from the registry itself: a
    counter's `_total`, a histogram's `_bucket`, `_sum` and `_count`, a gauge's own name."""
    suffixes = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count")}
    return {
        family.name + suffix
        for family in Metrics().registry.collect()
        for suffix in suffixes.get(family.type, ("",))
    }


def _dashboard(docs: list[dict[str, Any]]) -> tuple[dict[str, Any], dict[str, Any]]:
    (config_map,) = [
        doc
        for doc in docs
        if doc["kind"] == "ConfigMap" and doc["metadata"]["name"].endswith("-dashboard")
    ]
    return config_map, json.loads(config_map["data"]["dstreams.json"])


def test_grafana_dashboard_is_off_by_default(defaults: list[dict[str, Any]]) -> None:
    names = [doc["metadata"]["name"] for doc in defaults if doc["kind"] == "ConfigMap"]
    assert not [name for name in names if name.endswith("-dashboard")]


def test_grafana_dashboard_is_a_configmap_for_the_sidecar(full: list[dict[str, Any]]) -> None:
    config_map, dashboard = _dashboard(full)
    assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert config_map["metadata"]["annotations"] == {"grafana_folder": "Streaming"}
    titles = " | ".join(panel["title"].lower() for panel in dashboard["panels"])
    for topic in ("throughput", "end-to-end latency", "batch breakdown", "lag", "recovery"):
        assert topic in titles, f"no {topic} panel in: {titles}"
    assert "state size" in titles


def test_every_dashboard_query_names_a_metric_the_service_exports(
    full: list[dict[str, Any]],
) -> None:
    exported = exported_series()
    assert "dstreams_end_to_end_latency_seconds_bucket" in exported
    _, dashboard = _dashboard(full)
    for panel in dashboard["panels"]:
        assert panel["targets"], f"panel {panel['title']!r} queries nothing"
        for target in panel["targets"]:
            names = re.findall(r"\bdstreams_[a-z_]+", target["expr"])
            assert names, f"{panel['title']!r}: {target['expr']}"
            for name in names:
                assert name in exported, f"{panel['title']!r} uses {name}, which dstreams lacks"


# The alerts' promtool tests are in test_helm_alerts.py.


# --- schemas --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def kubeconform() -> Iterator[list[str]]:
    yield kubeconform_command()


def kubeconform_command() -> list[str]:
    """kubeconform with the offline schemas, as a command line; skips the test without them."""
    binary = _tool("kubeconform")
    schemas = TOOLS / "k8s-schemas" / f"v{KUBE_VERSION}-standalone-strict"
    if binary is None or not schemas.is_dir():
        pytest.skip(
            f"kubeconform or its offline schemas ({schemas}) are missing; "
            "`bash devtools/ensure-helm.sh` (run by `make sysdeps`) installs both"
        )
    location = str(TOOLS / "k8s-schemas") + (
        "/{{ .NormalizedKubernetesVersion }}-standalone{{ .StrictSuffix }}"
        "/{{ .ResourceKind }}{{ .KindSuffix }}.json"
    )
    # The Prometheus Operator's kinds have no schema offline; the tests above check them.
    return [
        binary, "-strict", "-summary", "-output", "json",
        "-kubernetes-version", KUBE_VERSION, "-schema-location", location,
        "-skip", "ServiceMonitor,PrometheusRule",
    ]  # fmt: skip


@pytest.mark.parametrize("values", [{}, FULL, KUBERNETES], ids=["defaults", "full", "kubernetes"])
def test_manifests_match_the_kubernetes_schemas(
    helm: str, kubeconform: list[str], tmp_path: Path, values: dict[str, Any]
) -> None:
    rendered = _template(helm, "-f", str(_write_values(tmp_path / "values.yaml", values)))
    assert rendered.returncode == 0, rendered.stderr
    manifests = tmp_path / "manifests.yaml"
    manifests.write_text(rendered.stdout)
    result = _run(*kubeconform, str(manifests))
    assert result.returncode == 0, result.stdout + result.stderr
    docs = [doc for doc in yaml.safe_load_all(rendered.stdout) if doc]
    core = [doc for doc in docs if "coreos" not in doc["apiVersion"]]
    summary = json.loads(result.stdout)["summary"]
    assert summary["valid"] == len(core) >= 3, summary


# --- Spark on Kubernetes ----------------------------------------------------------------------


def _kinds(docs: list[dict[str, Any]]) -> list[str]:
    return sorted(doc["kind"] for doc in docs)


def _executor_pod(docs: list[dict[str, Any]]) -> dict[str, Any]:
    template = yaml.safe_load(_one(docs, "ConfigMap")["data"]["executor-pod.yaml"])
    assert isinstance(template, dict)
    return template


def _matches(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(key) == value for key, value in selector.items())


def test_local_mode_asks_nothing_of_the_kubernetes_api(defaults: list[dict[str, Any]]) -> None:
    assert not {"Role", "RoleBinding", "ServiceAccount", "ClusterRole"} & set(_kinds(defaults))
    assert _kinds(defaults).count("Service") == 1
    assert "executor-pod.yaml" not in _one(defaults, "ConfigMap")["data"]
    assert _config_file(defaults)["spark"]["master"] == "local[2]"


def test_kubernetes_rbac_is_limited_to_the_namespace_and_what_spark_needs(
    on_kubernetes: list[dict[str, Any]],
) -> None:
    assert "ClusterRole" not in _kinds(on_kubernetes)
    assert "ClusterRoleBinding" not in _kinds(on_kubernetes)
    role = _one(on_kubernetes, "Role")
    assert role["metadata"]["namespace"] == NAMESPACE
    granted: dict[str, set[str]] = {}
    for rule in role["rules"]:
        assert rule["apiGroups"] == [""], rule
        for resource in rule["resources"]:
            granted.setdefault(resource, set()).update(rule["verbs"])
    assert set(granted) == {"pods", "services", "configmaps", "persistentvolumeclaims"}
    every_verb = {verb for verbs in granted.values() for verb in verbs}
    assert "*" not in every_verb and not {"escalate", "bind", "impersonate"} & every_verb
    assert {"create", "delete", "watch", "list"} <= granted["pods"]
    binding = _one(on_kubernetes, "RoleBinding")
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "Role",
        "name": role["metadata"]["name"],
    }
    account = _one(on_kubernetes, "ServiceAccount")["metadata"]["name"]
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": account, "namespace": NAMESPACE}
    ]
    pod = _pod(on_kubernetes)
    assert pod["serviceAccountName"] == account
    assert pod["automountServiceAccountToken"] is True


def test_the_headless_service_publishes_the_drivers_ports_before_it_is_ready(
    on_kubernetes: list[dict[str, Any]],
) -> None:
    (headless,) = [
        doc
        for doc in on_kubernetes
        if doc["kind"] == "Service" and doc["spec"].get("clusterIP") == "None"
    ]
    spec = headless["spec"]
    assert spec["publishNotReadyAddresses"] is True
    driver_labels = _one(on_kubernetes, "Deployment")["spec"]["template"]["metadata"]["labels"]
    assert _matches(spec["selector"], driver_labels)
    ports = {port["name"]: port["containerPort"] for port in _container(on_kubernetes)["ports"]}
    assert {p["targetPort"]: p["port"] for p in spec["ports"]} == {
        "spark-driver": ports["spark-driver"],
        "spark-blocks": ports["spark-blocks"],
    }
    config = _config_file(on_kubernetes)["spark"]
    assert config["driver_host"] == f"{headless['metadata']['name']}.{NAMESPACE}.svc"
    assert config["conf"]["spark.driver.port"] == str(ports["spark-driver"])
    assert config["conf"]["spark.driver.blockManager.port"] == str(ports["spark-blocks"])


def test_executor_pods_share_the_drivers_image_security_and_volume(
    on_kubernetes: list[dict[str, Any]],
) -> None:
    template = _executor_pod(on_kubernetes)
    (executor,) = template["spec"]["containers"]
    driver_pod, driver = _pod(on_kubernetes), _container(on_kubernetes)
    assert executor["image"] == driver["image"]
    assert executor["securityContext"] == driver["securityContext"]
    assert template["spec"]["securityContext"] == driver_pod["securityContext"]
    assert template["spec"]["automountServiceAccountToken"] is False
    volumes = {v["name"]: v for v in template["spec"]["volumes"]}
    driver_volumes = {v["name"]: v for v in driver_pod["volumes"]}
    assert volumes["state"] == driver_volumes["state"]
    assert {"mountPath": "/var/lib/dstreams", "name": "state"} in executor["volumeMounts"]
    conf = _config_file(on_kubernetes)["spark"]["conf"]
    assert executor["name"] == conf["spark.kubernetes.executor.podTemplateContainerName"]
    assert conf["spark.kubernetes.container.image"] == driver["image"]
    assert conf["spark.executor.instances"] == "3"
    assert conf["spark.executor.memory"] == "2g"
    assert conf["spark.sql.shuffle.partitions"] == "8"  # the user's own settings stay


def test_no_driver_service_selects_executor_pods(on_kubernetes: list[dict[str, Any]]) -> None:
    labels = _executor_pod(on_kubernetes)["metadata"]["labels"]
    for service in [doc for doc in on_kubernetes if doc["kind"] == "Service"]:
        assert not _matches(service["spec"]["selector"], labels), service["metadata"]["name"]
    deployment = _one(on_kubernetes, "Deployment")["spec"]["selector"]["matchLabels"]
    assert not _matches(deployment, labels)


def test_kubernetes_config_and_env_load_in_dstreams(
    on_kubernetes: list[dict[str, Any]], tmp_path: Path
) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(_one(on_kubernetes, "ConfigMap")["data"]["config.yaml"])
    env = _env(_container(on_kubernetes))
    pod_name = "demo-dstreams-7d9f-x2k"
    environ = {
        name: entry["value"].replace("$(POD_NAME)", pod_name)
        for name, entry in env.items()
        if "value" in entry
    }
    settings = load_settings(config, environ)
    assert settings.spark.parsed_master.kind == "kubernetes"
    assert settings.spark.bind_address == "0.0.0.0"  # noqa: S104 - the pod's own interfaces
    conf = settings.spark.spark_conf()
    assert conf["spark.kubernetes.driver.pod.name"] == pod_name  # executors owned by the driver
    assert conf["spark.kubernetes.namespace"] == NAMESPACE
    assert env["POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"spark": {"mode": "kubernetes"}}, "ReadWriteMany"),
        (
            {"spark": {"mode": "kubernetes"}, "persistence": {"enabled": False}},
            "object-store URI",
        ),
        (
            {
                "spark": {"mode": "kubernetes"},
                "persistence": {"enabled": False},
                "config": {"checkpoint": {"path": "hdfs://namenode/ckpt"}},
            },
            "object-store URI (s3://bucket/prefix",
        ),
        (
            {
                "spark": {"mode": "kubernetes"},
                "persistence": {"enabled": False},
                "config": {
                    "checkpoint": {"path": "s3a://bucket/ckpt"},
                    "sinks": {"o": {"type": "files", "path": "/x"}},
                },
            },
            "config.sinks.o writes files",
        ),
        ({"spark": {"mode": "cluster"}}, "mode"),
    ],
    ids=["read-write-once", "no-volume", "hdfs-uri", "files-without-volume", "unknown-mode"],
)
def test_kubernetes_mode_refuses_storage_executors_cannot_share(
    helm: str, tmp_path: Path, values: dict[str, Any], message: str
) -> None:
    result = _template(helm, "-f", str(_write_values(tmp_path / "values.yaml", values)))
    assert result.returncode != 0
    assert message in result.stderr


def test_object_store_checkpoints_need_no_volume(render: Render) -> None:
    docs = render(
        {
            "spark": {"mode": "kubernetes"},
            "persistence": {"enabled": False},
            "config": {
                "journal": {"type": "kafka", "topic": "journal"},
                "checkpoint": {"path": "s3a://bucket/ckpt"},
            },
        }
    )
    assert "PersistentVolumeClaim" not in _kinds(docs)


# --- extra volumes and environment, identity, Spark UI, disruption budget -----------------------

# A TLS-secured Kafka: the cluster's CA and the client's certificate, mounted from Secrets.
EXTRAS: dict[str, Any] = {
    "extraVolumes": [
        {"name": "kafka-ca", "secret": {"secretName": "my-cluster-cluster-ca-cert"}},
        {"name": "kafka-user", "secret": {"secretName": "dstreams"}},
    ],
    "extraVolumeMounts": [
        {"name": "kafka-ca", "mountPath": "/etc/kafka/ca", "readOnly": True},
        {"name": "kafka-user", "mountPath": "/etc/kafka/user", "readOnly": True},
    ],
    "extraEnv": [{"name": "JAVA_TOOL_OPTIONS", "value": "-Xss4m"}],
    "envFrom": [{"secretRef": {"name": "cloud-credentials"}, "prefix": "AWS_"}],
    "config": {"kafka": {"properties": {"ssl.ca.location": "/etc/kafka/ca/ca.crt"}}},
}
IDENTITY = {"eks.amazonaws.com/role-arn": "arn:aws:iam::111122223333:role/dstreams"}


def _assert_extras_in(pod: dict[str, Any], container: dict[str, Any]) -> None:
    volumes = {volume["name"]: volume for volume in pod["volumes"]}
    for volume in EXTRAS["extraVolumes"]:
        assert volumes[volume["name"]] == volume
    for mount in EXTRAS["extraVolumeMounts"]:
        assert mount in container["volumeMounts"]
    assert _env(container)["JAVA_TOOL_OPTIONS"] == {"name": "JAVA_TOOL_OPTIONS", "value": "-Xss4m"}
    assert container["envFrom"] == EXTRAS["envFrom"]
    # The chart's own volumes stay.
    assert {"config", "state", "scratch"} & set(volumes) >= {"state", "scratch"}


def test_extra_volumes_and_env_reach_the_driver_and_the_standby(render: Render) -> None:
    docs = render(STANDBY, EXTRAS)
    assert _one(docs, "Deployment")["spec"]["replicas"] == 2  # one pod spec for both
    _assert_extras_in(_pod(docs), _container(docs))
    assert "config" in {volume["name"] for volume in _pod(docs)["volumes"]}


def test_extra_volumes_and_env_reach_the_executors(render: Render) -> None:
    template = _executor_pod(render(KUBERNETES, EXTRAS))
    (executor,) = template["spec"]["containers"]
    _assert_extras_in(template["spec"], executor)
    assert _env(executor)["HOME"]["value"] == "/tmp"


def test_without_extras_the_executor_template_is_unchanged(
    on_kubernetes: list[dict[str, Any]],
) -> None:
    (executor,) = _executor_pod(on_kubernetes)["spec"]["containers"]
    assert executor["env"] == [{"name": "HOME", "value": "/tmp"}]
    assert "envFrom" not in executor
    assert {v["name"] for v in _executor_pod(on_kubernetes)["spec"]["volumes"]} == {
        "state",
        "scratch",
    }


def test_extra_volumes_cannot_take_the_charts_own_names(helm: str) -> None:
    result = _template(helm, "--set", "extraVolumes[0].name=state,extraVolumes[0].emptyDir=null")
    assert result.returncode != 0
    assert "the chart's own volume" in result.stderr


def test_service_account_annotations_in_kubernetes_mode(render: Render) -> None:
    docs = render(KUBERNETES, {"serviceAccount": {"annotations": IDENTITY}})
    account = _one(docs, "ServiceAccount")
    assert account["metadata"]["annotations"] == IDENTITY
    template = _executor_pod(docs)["spec"]
    # Executors take the identity, still without the account's API token.
    assert template["serviceAccountName"] == account["metadata"]["name"]
    assert template["automountServiceAccountToken"] is False
    assert _pod(docs)["serviceAccountName"] == account["metadata"]["name"]


def test_service_account_annotations_in_local_mode_make_an_account(
    render: Render, defaults: list[dict[str, Any]]
) -> None:
    assert "ServiceAccount" not in _kinds(defaults)
    docs = render({"serviceAccount": {"annotations": IDENTITY}})
    account = _one(docs, "ServiceAccount")
    assert account["metadata"]["annotations"] == IDENTITY
    assert account["automountServiceAccountToken"] is False
    assert not {"Role", "RoleBinding"} & set(_kinds(docs))  # an identity, no API access
    assert _pod(docs)["serviceAccountName"] == account["metadata"]["name"]
    assert _pod(docs)["automountServiceAccountToken"] is False


@pytest.mark.parametrize(
    "values",
    [
        {"serviceAccountName": "mine"},
        {
            **KUBERNETES,
            "spark": {
                "mode": "kubernetes",
                "kubernetes": {"serviceAccount": {"create": False, "name": "mine"}},
            },
        },
    ],  # fmt: skip
    ids=["local", "kubernetes"],
)
def test_service_account_annotations_need_the_charts_own_account(
    helm: str, tmp_path: Path, values: dict[str, Any]
) -> None:
    layered = _merged(values, {"serviceAccount": {"annotations": IDENTITY}})
    result = _template(helm, "-f", str(_write_values(tmp_path / "values.yaml", layered)))
    assert result.returncode != 0
    assert "annotate" in result.stderr


def test_spark_ui_is_off_by_default(defaults: list[dict[str, Any]]) -> None:
    assert [port["name"] for port in _container(defaults)["ports"]] == ["http"]
    assert [port["name"] for port in _one(defaults, "Service")["spec"]["ports"]] == ["http"]
    assert "spark.ui.enabled" not in _config_file(defaults)["spark"]["conf"]


@pytest.mark.parametrize("mode", [{}, KUBERNETES], ids=["local", "kubernetes"])
def test_spark_ui_port_on_the_container_and_the_service(
    render: Render, tmp_path: Path, mode: dict[str, Any]
) -> None:
    docs = render(mode, {"sparkUI": {"enabled": True, "port": 4041}})
    ports = {port["name"]: port["containerPort"] for port in _container(docs)["ports"]}
    assert ports["spark-ui"] == 4041
    (service,) = [
        d for d in docs if d["kind"] == "Service" and d["spec"].get("clusterIP") != "None"
    ]
    assert {"name": "spark-ui", "port": 4041, "targetPort": "spark-ui", "protocol": "TCP"} in (
        service["spec"]["ports"]
    )
    config = tmp_path / "config.yaml"
    config.write_text(_one(docs, "ConfigMap")["data"]["config.yaml"])
    conf = load_settings(config, {}).spark.conf
    assert (conf["spark.ui.enabled"], conf["spark.ui.port"]) == ("true", "4041")
    # Spark binds its UI to SPARK_LOCAL_IP, which dstreams pins to loopback in local mode; the
    # driver's other ports follow spark.driver.bindAddress and stay where they were.
    local_ip = _env(_container(docs)).get("SPARK_LOCAL_IP", {}).get("value")
    assert local_ip == (None if mode else "0.0.0.0")  # noqa: S104 - the UI on the pod's own interfaces


def test_spark_ui_port_must_be_free(helm: str) -> None:
    result = _template(helm, "--set", "sparkUI.enabled=true,sparkUI.port=8080")
    assert result.returncode != 0
    assert "sparkUI.port 8080" in result.stderr


def test_disruption_budget_covers_driver_and_standby(
    render: Render, defaults: list[dict[str, Any]]
) -> None:
    assert "PodDisruptionBudget" not in _kinds(defaults)  # one pod: a budget would block drains
    docs = render(STANDBY)
    budget = _one(docs, "PodDisruptionBudget")["spec"]
    labels = _one(docs, "Deployment")["spec"]["template"]["metadata"]["labels"]
    assert _matches(budget["selector"]["matchLabels"], labels)
    assert budget["maxUnavailable"] == 1
    assert budget["unhealthyPodEvictionPolicy"] == "AlwaysAllow"  # the unready standby may go
    off = render(STANDBY, {"podDisruptionBudget": {"enabled": False}})
    assert "PodDisruptionBudget" not in _kinds(off)


@pytest.mark.parametrize(
    "typo",
    [
        "extraVolume[0].name=x",
        "extraVolumeMounts[0].name=x,extraVolumeMounts[0].mountpath=/x",
        "envFrom[0].secretref.name=x",
        "serviceAccount.anotations.a=b",
        "sparkUI.enable=true",
        "podDisruptionBudget.enable=false",
    ],
)
def test_schema_rejects_typos_in_the_new_values(helm: str, typo: str) -> None:
    result = _template(helm, "--set", typo)
    assert result.returncode != 0
    assert "schema" in result.stderr.lower(), result.stderr


EXTRAS_EVERYWHERE: dict[str, Any] = _merged(
    _merged(KUBERNETES, EXTRAS),
    {"serviceAccount": {"annotations": IDENTITY}, "sparkUI": {"enabled": True}},
)
EXTRAS_STANDBY: dict[str, Any] = _merged(
    _merged(STANDBY, EXTRAS),
    {"serviceAccount": {"annotations": IDENTITY}, "sparkUI": {"enabled": True}},
)


@pytest.mark.parametrize(
    "values", [EXTRAS_EVERYWHERE, EXTRAS_STANDBY], ids=["kubernetes", "standby"]
)
def test_new_values_render_valid_manifests(
    helm: str, kubeconform: list[str], tmp_path: Path, values: dict[str, Any]
) -> None:
    path = _write_values(tmp_path / "values.yaml", values)
    rendered = _template(helm, "-f", str(path))
    assert rendered.returncode == 0, rendered.stderr
    manifests = tmp_path / "manifests.yaml"
    manifests.write_text(rendered.stdout)
    result = _run(*kubeconform, str(manifests))
    assert result.returncode == 0, result.stdout + result.stderr
    # The executor pod template is a manifest too, inside the ConfigMap.
    docs = [doc for doc in yaml.safe_load_all(rendered.stdout) if doc]
    if "executor-pod.yaml" in _one(docs, "ConfigMap")["data"]:
        (tmp_path / "executor.yaml").write_text(
            _one(docs, "ConfigMap")["data"]["executor-pod.yaml"]
        )
        result = _run(*kubeconform, str(tmp_path / "executor.yaml"))
        assert result.returncode == 0, result.stdout + result.stderr
    lint = _run(
        helm, "lint", "--strict", str(CHART), "--kube-version", KUBE_VERSION, "-f", str(path)
    )
    assert lint.returncode == 0, lint.stdout + lint.stderr


# --- the configuration's schema in values.schema.json ---------------------------------------

SCHEMA_GENERATOR = ROOT / "devtools" / "chart_config_schema.py"


def test_the_charts_config_schema_is_the_services_own() -> None:
    result = subprocess.run(
        [sys.executable, str(SCHEMA_GENERATOR), "--check"],
        capture_output=True, text=True, timeout=120, check=False,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    assert result.returncode == 0, (
        f"{result.stderr}\nvalues.schema.json's `config` differs from `dstreams config schema`; "
        f"run `.venv/bin/python devtools/chart_config_schema.py` and commit the result"
    )


def test_the_config_schema_stands_alone_in_values_schema() -> None:
    """Helm resolves a `#/$defs/...` pointer against values.schema.json's root: none may remain."""
    text = (CHART / "values.schema.json").read_text()
    schema = json.loads(text)
    assert "$ref" not in text and "$defs" not in text
    config = schema["properties"]["config"]
    assert config["additionalProperties"] is False
    assert {"app_id", "job", "kafka", "sinks", "journal"} <= set(config["properties"])


@pytest.mark.parametrize(
    ("typo", "where"),
    [
        ("config.batch_intervall_ms=1000", "'/config'"),
        ("config.kafka.bootstrap_server=kafka:9092", "'/config/kafka'"),
        ("config.journal.pat=/x", "'/config/journal'"),
        ("config.sources.lines.topic=lines", "'/config/sources/lines'"),
        ("config.http.port=http", "'/config/http/port'"),
    ],
)
def test_a_typo_in_config_fails_lint_and_template(helm: str, typo: str, where: str) -> None:
    for command in ("lint", "template"):
        result = _run(helm, command, *(["demo"] if command == "template" else []),
                      str(CHART), "--kube-version", KUBE_VERSION, "--set", typo)  # fmt: skip
        assert result.returncode != 0, f"helm {command} accepted {typo}"
        output = result.stdout + result.stderr
        assert "schema" in output and where in output, output


def test_a_good_config_passes_lint(helm: str, tmp_path: Path) -> None:
    good = {
        "config": {
            "sources": {"lines": {"topics": ["lines"], "starting_offsets": "earliest"}},
            "sinks": {
                "counts": {"type": "kafka", "topic": "counts", "replication_factor": 3},
                "table": {"type": "postgres", "table": "counts", "columns": ["word", "n"]},
                "out": {"type": "files", "path": "/var/lib/dstreams/out"},
            },
            "kafka": {"properties": {"security.protocol": "SSL"}},
        },
        "secrets": {"sinkDsns": {"table": {"secretName": "db", "key": "dsn"}}},
    }
    path = _write_values(tmp_path / "good.yaml", good)
    result = _run(
        helm, "lint", "--strict", str(CHART), "--kube-version", KUBE_VERSION, "-f", str(path)
    )
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize(
    "values",
    [KUBERNETES, STANDBY, {"sparkUI": {"enabled": True}}, FULL],
    ids=["kubernetes", "standby", "spark-ui", "full"],
)
def test_what_the_chart_writes_into_the_config_meets_the_schema(
    helm: str, render: Render, tmp_path: Path, values: dict[str, Any]
) -> None:
    """The keys templates set (Spark's master, address and conf; the file journal's path) are
    valid config too: the rendered file, given back as `config`, passes the schema."""
    rendered = _config_file(render(values))
    path = _write_values(tmp_path / "again.yaml", {"config": rendered})
    result = _template(helm, "-f", str(path))
    assert result.returncode == 0, result.stderr


def test_a_kafka_journal_release_carries_no_file_path(render: Render, tmp_path: Path) -> None:
    docs = render(STANDBY)
    config = tmp_path / "config.yaml"
    config.write_text(_one(docs, "ConfigMap")["data"]["config.yaml"])
    journal = load_settings(config, {}).journal
    assert journal.type == "kafka"
    assert "path" not in _config_file(docs)["journal"]
