"""The chart's alerts, run by Prometheus' own rule tester (`promtool test rules`); its dashboard.

Every alert the PrometheusRule renders has series that fire it and series that must not; a test
fails when an alert has no such pair. Each alert also has a runbook line in the chart's README.
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.unit.test_helm_chart import (
    CHART,
    FULL,
    NAMESPACE,
    _one,
    _run,
    _template,
    _tool,
    _write_values,
    exported_series,
)

WHERE = f'namespace="{NAMESPACE}",pod="p"'
POD = {"namespace": NAMESPACE, "pod": "p"}
WARNING, CRITICAL = {**POD, "severity": "warning"}, {**POD, "severity": "critical"}
LINES = {"topic": "lines"}


def _minutes(values: Callable[[int], float], count: int) -> str:
    return " ".join(f"{values(minute):g}" for minute in range(count))


def _rule_test(series: dict[str, str], alert: str, labels: dict[str, str] | None) -> dict[str, Any]:
    """One promtool test case: these series, then `alert` fires with `labels` at 40m, or not."""
    expected = [{"exp_labels": labels}] if labels is not None else []
    return {
        "interval": "1m",
        "input_series": [{"series": name, "values": values} for name, values in series.items()],
        "alert_rule_test": [{"eval_time": "40m", "alertname": alert, "exp_alerts": expected}],
    }


def _delay(seconds_at: Callable[[int], float]) -> dict[str, str]:
    """One batch a second; its start delay in seconds at each minute. Sum and count are
    cumulative."""
    name = "dstreams_batch_scheduling_delay_seconds"

    def total(minute: int) -> float:
        return sum(60 * seconds_at(i) for i in range(minute))

    return {
        f"{name}_sum{{{WHERE}}}": _minutes(total, 45),
        f"{name}_count{{{WHERE}}}": _minutes(lambda m: 60 * m, 45),
    }


def _first_alerts() -> list[dict[str, Any]]:
    failed = f'dstreams_batches_total{{outcome="failed",{WHERE}}}'
    done = f"dstreams_last_completed_batch_timestamp_seconds{{{WHERE}}}"
    lag = f'dstreams_consumer_lag_records{{topic="lines",partition="0",{WHERE}}}'
    growing, shrinking = (lambda m: 40.0 + m), (lambda m: 120.0 - 2 * m)
    return [
        _rule_test({failed: "0x35 1 1 1 1 1"}, "DStreamsBatchesFailing", WARNING),
        _rule_test({failed: "0x45"}, "DStreamsBatchesFailing", None),
        _rule_test(_delay(growing), "DStreamsSchedulingDelayGrowing", WARNING),
        _rule_test(_delay(shrinking), "DStreamsSchedulingDelayGrowing", None),
        # promtool's clock starts at 0: a completion at 60 s is 39 minutes old at 40m.
        _rule_test({done: "60x45"}, "DStreamsNoBatchCompleted", CRITICAL),
        _rule_test({done: "0x45"}, "DStreamsNoBatchCompleted", None),  # never completed yet
        _rule_test({done: "60+60x45"}, "DStreamsNoBatchCompleted", None),
        _rule_test({lag: "2000000x45"}, "DStreamsConsumerLagHigh", {**WARNING, **LINES}),
        _rule_test({lag: "1000x45"}, "DStreamsConsumerLagHigh", None),
    ]


def _record_counter_alerts() -> list[dict[str, Any]]:
    """Lost offsets, dead letters, decode errors: a count in the last 15 minutes fires, also
    when it is the series' first (a topic's series appears with its first record)."""
    cases = []
    lost = f'dstreams_lost_offsets_total{{topic="lines",partition="0",{WHERE}}}'
    for alert, series, severity in [
        ("DStreamsOffsetsLost", lost, CRITICAL),
        ("DStreamsDeadLetters", f'dstreams_dead_letters_total{{topic="lines",{WHERE}}}', WARNING),
        ("DStreamsDecodeErrors", f'dstreams_decode_errors_total{{topic="lines",{WHERE}}}', WARNING),
    ]:  # fmt: skip
        cases += [
            _rule_test({series: "0x30 100x15"}, alert, {**severity, **LINES}),
            _rule_test({series: "_x30 100x15"}, alert, {**severity, **LINES}),  # a new series
            _rule_test({series: "0x45"}, alert, None),
            _rule_test({series: "_x5 100x40"}, alert, None),  # counted, but 34 minutes ago
        ]
    return cases


def _state_alerts() -> list[dict[str, Any]]:
    under = f'dstreams_topic_under_replicated{{topic="lines",role="input",{WHERE}}}'
    checkpoint = f"dstreams_last_checkpoint_timestamp_seconds{{{WHERE}}}"
    every = f"dstreams_checkpoint_interval_seconds{{{WHERE}}}"
    done = f"dstreams_last_completed_batch_timestamp_seconds{{{WHERE}}}"
    interval = f"dstreams_batch_interval_seconds{{{WHERE}}}"
    epoch = f"dstreams_epoch{{{WHERE}}}"
    replicated = {**WARNING, **LINES, "role": "input"}
    return [
        _rule_test({under: "1x45"}, "DStreamsTopicUnderReplicated", replicated),
        _rule_test({under: "0x45"}, "DStreamsTopicUnderReplicated", None),
        # A checkpoint at 60 s and none since: 39 minutes, far over 10 intervals of 10 s.
        _rule_test({checkpoint: "60x45", every: "10x45"}, "DStreamsCheckpointOld", WARNING),
        _rule_test({checkpoint: "60+60x45", every: "10x45"}, "DStreamsCheckpointOld", None),
        _rule_test({checkpoint: "60x45", every: "600x45"}, "DStreamsCheckpointOld", None),
        _rule_test({checkpoint: "0x45", every: "10x45"}, "DStreamsCheckpointOld", None),
        _rule_test({checkpoint: "0x45", every: "0x45"}, "DStreamsCheckpointOld", None),  # stateless
        # Batches complete (the batch time moves), but 2,300 one-second intervals behind.
        _rule_test({done: "60+1x45", interval: "1x45"}, "DStreamsBatchesBehind", WARNING),
        _rule_test({done: "60+60x45", interval: "1x45"}, "DStreamsBatchesBehind", None),
        _rule_test({done: "60x45", interval: "60x45"}, "DStreamsBatchesBehind", None),  # 39 of 60 s
        _rule_test({done: "0x45", interval: "1x45"}, "DStreamsBatchesBehind", None),  # a standby
        # Three restarts in 30 minutes: epochs 1 to 4, each process at 0 until it opens the journal.
        _rule_test({epoch: "1x20 0 2x3 0 3x3 0 4x10"}, "DStreamsRecoveryLoop", CRITICAL),
        _rule_test({epoch: "1x20 0 2x23"}, "DStreamsRecoveryLoop", None),
        # Two restarts are two, although the epoch series changed four times (through 0).
        _rule_test({epoch: "1x20 0 2x3 0 3x15"}, "DStreamsRecoveryLoop", None),
        _rule_test({epoch: "7x45"}, "DStreamsRecoveryLoop", None),
        _rule_test({epoch: "1 0 2 0 3 0 4 5x40"}, "DStreamsRecoveryLoop", None),  # long ago
        *_state_size_alerts(),
    ]


def _state_size_alerts() -> list[dict[str, Any]]:
    counts = f'dstreams_state_bytes{{stream="counts",{WHERE}}}'
    sessions = f'dstreams_state_bytes{{stream="sessions",{WHERE}}}'
    large = {**WARNING, "stream": "counts"}
    gib = 1 << 30
    return [
        # 5 GiB for the last 20 minutes: over the default 4 GiB for longer than 15 minutes.
        _rule_test({counts: f"{gib}x20 {5 * gib}x25"}, "DStreamsStateLarge", large),
        _rule_test({counts: f"{gib}x30 {5 * gib}x15"}, "DStreamsStateLarge", None),  # 10 minutes
        # Two streams of 3 GiB: the threshold is per stream, not their sum.
        _rule_test(
            {counts: f"{3 * gib}x45", sessions: f"{3 * gib}x45"}, "DStreamsStateLarge", None
        ),
    ]


CASES = _first_alerts() + _record_counter_alerts() + _state_alerts()


@pytest.fixture(scope="module")
def rule_groups(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    helm = _tool("helm")
    if helm is None:
        pytest.skip("helm not found; `bash devtools/ensure-helm.sh` (run by `make sysdeps`)")
    values = _write_values(tmp_path_factory.mktemp("alerts") / "values.yaml", FULL)
    result = _template(helm, "-f", str(values))
    assert result.returncode == 0, result.stderr
    docs = [doc for doc in yaml.safe_load_all(result.stdout) if doc]
    groups: list[dict[str, Any]] = _one(docs, "PrometheusRule")["spec"]["groups"]
    return groups


def _alerts(groups: list[dict[str, Any]]) -> set[str]:
    return {rule["alert"] for group in groups for rule in group["rules"] if "alert" in rule}


def test_every_alert_has_a_case_that_fires_it_and_one_that_does_not(
    rule_groups: list[dict[str, Any]],
) -> None:
    fires = {
        c["alert_rule_test"][0]["alertname"] for c in CASES if c["alert_rule_test"][0]["exp_alerts"]
    }
    quiet = {
        c["alert_rule_test"][0]["alertname"]
        for c in CASES
        if not c["alert_rule_test"][0]["exp_alerts"]
    }
    alerts = _alerts(rule_groups)
    assert len(alerts) == 12
    assert alerts - fires == set(), "alerts with no promtool case that fires them"
    assert alerts - quiet == set(), "alerts with no promtool case where they stay quiet"
    assert (fires | quiet) - alerts == set(), "cases for alerts the chart does not render"


def test_alerts_fire_when_they_should_and_only_then(
    rule_groups: list[dict[str, Any]], tmp_path: Path
) -> None:
    """The rules' PromQL, run by Prometheus' own rule tester against made-up series."""
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool not found; `make sysdeps` installs Debian's prometheus package")
    groups = [
        {
            **group,
            "rules": [{k: v for k, v in r.items() if k != "annotations"} for r in group["rules"]],
        }
        for group in rule_groups
    ]  # their wording is not under test; exact matching would be
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump({"groups": groups}))
    tests = tmp_path / "tests.yaml"
    tests.write_text(yaml.safe_dump({"rule_files": ["rules.yaml"], "tests": CASES}))
    result = _run(promtool, "check", "rules", str(tmp_path / "rules.yaml"))
    assert result.returncode == 0, result.stdout + result.stderr
    result = _run(promtool, "test", "rules", str(tests))
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_alert_has_a_runbook_line_in_the_readme(rule_groups: list[dict[str, Any]]) -> None:
    readme = (CHART / "README.md").read_text()
    runbook = readme[readme.index("## Alerts") :]
    for alert in _alerts(rule_groups):
        assert re.search(rf"^\| `{alert}` \|", runbook, re.MULTILINE), f"no runbook line: {alert}"


# --- the dashboard ------------------------------------------------------------------------------

DASHBOARD = CHART / "dashboards" / "dstreams.json"


def _families(expr: str) -> set[str]:
    """The metric families an expression reads (a histogram's _bucket, _sum, _count as one)."""
    return {
        re.sub(r"_(sum|count|bucket)$", "", name)
        for name in re.findall(r"\bdstreams_[a-z_]+", expr)
    }


def _panel_exprs() -> list[str]:
    dashboard = json.loads(DASHBOARD.read_text())
    return [target["expr"] for panel in dashboard["panels"] for target in panel["targets"]]


def test_dashboard_panels_read_only_metrics_the_service_exports() -> None:
    exported = exported_series()
    exprs = _panel_exprs()
    assert exprs
    for expr in exprs:
        names = re.findall(r"\bdstreams_[a-z_]+", expr)
        assert names, expr
        for name in names:
            assert name in exported, f"{expr} reads {name}, which dstreams does not export"


def test_dashboard_picks_an_application_and_its_instances() -> None:
    variables = {v["name"]: v for v in json.loads(DASHBOARD.read_text())["templating"]["list"]}
    assert "dstreams_app_info" in variables["app"]["definition"]
    assert '"$app"' in variables["instance"]["definition"]
    # "All" must mean this application's instances, not every target Prometheus scrapes.
    assert "allValue" not in variables["instance"]
    for expr in _panel_exprs():
        assert 'instance=~"$instance"' in expr, expr


def test_dashboard_shows_what_every_alert_watches(rule_groups: list[dict[str, Any]]) -> None:
    shown = set().union(*(_families(expr) for expr in _panel_exprs()))
    for group in rule_groups:
        for rule in group["rules"]:
            missing = _families(rule["expr"]) - shown
            assert not missing, f"{rule['alert']} watches {missing}, which no panel shows"
