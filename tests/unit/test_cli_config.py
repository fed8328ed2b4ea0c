"""`dstreams config validate|show|schema` through click's runner."""

from __future__ import annotations

import json
from pathlib import Path

import click
import pytest
import yaml
from click.testing import CliRunner

from service.cli.config import config

CANARY = "canary-Hw27pK"
GOOD = f"""\
app_id: wordcount
job: examples.wordcount:build
kafka:
  bootstrap_servers: localhost:9092
  sasl_password: {CANARY}
sinks:
  pg: {{type: postgres, dsn: "postgresql://u:{CANARY}@db/x", table: t, columns: [a]}}
"""


@pytest.fixture
def runner() -> CliRunner:
    return CliRunner()


@pytest.fixture
def good(tmp_path: Path) -> Path:
    path = tmp_path / "good.yaml"
    path.write_text(GOOD)
    return path


def invoke(
    runner: CliRunner, *args: str, env: dict[str, str] | None = None
) -> click.testing.Result:
    # `dstreams` registers the group under `config`; invoking the group directly is the same.
    return runner.invoke(config, list(args), env=env, catch_exceptions=False)


def test_validate_prints_ok(runner: CliRunner, good: Path) -> None:
    result = invoke(runner, "validate", "--config", str(good))
    assert result.exit_code == 0
    assert result.stdout == "ok\n"


def test_validate_prints_one_line_per_problem_and_exits_2(
    runner: CliRunner, tmp_path: Path
) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(GOOD.replace("type: postgres", "type: kafak") + "logging: {level: LOUD}\n")
    result = invoke(runner, "validate", "--config", str(bad))
    assert result.exit_code == 2
    assert result.stdout == ""
    assert result.stderr.splitlines() == [
        "sinks.pg.type: 'kafak' is not one of kafka, postgres, files, console",
        "logging.level: 'LOUD' is not one of DEBUG, INFO, WARNING, ERROR, CRITICAL",
    ]
    assert "Traceback" not in result.output


def test_validate_missing_file_and_yaml_error(runner: CliRunner, tmp_path: Path) -> None:
    result = invoke(runner, "validate", "--config", str(tmp_path / "missing.yaml"))
    assert result.exit_code == 2
    assert "config file not found" in result.stderr
    broken = tmp_path / "broken.yaml"
    broken.write_text("app_id: [x\n")
    result = invoke(runner, "validate", "--config", str(broken))
    assert result.exit_code == 2
    assert f"{broken}:" in result.stderr and "invalid YAML" in result.stderr
    assert "Traceback" not in result.output


def test_config_path_from_environment(runner: CliRunner, good: Path) -> None:
    result = invoke(runner, "validate", env={"DSTREAMS_CONFIG": str(good)})
    assert result.exit_code == 0, result.output


def test_show_masks_secrets_in_yaml_and_json(runner: CliRunner, good: Path) -> None:
    env = {
        "DSTREAMS_KAFKA__SSL_KEY_PASSWORD": CANARY,
        "DSTREAMS_HTTP__PORT": "9123",
        "DSTREAMS_SCHEMA_REGISTRY__URL": "https://registry:8081",
        "DSTREAMS_SCHEMA_REGISTRY__BASIC_AUTH_USER": "dstreams",
        "DSTREAMS_SCHEMA_REGISTRY__BASIC_AUTH_PASSWORD": CANARY,
        "DSTREAMS_SCHEMA_REGISTRY__SSL_KEY_PASSWORD": CANARY,
    }
    as_yaml = invoke(runner, "show", "--config", str(good), env=env)
    as_json = invoke(runner, "show", "--config", str(good), "--format", "json", env=env)
    for result in (as_yaml, as_json):
        assert result.exit_code == 0
        assert CANARY not in result.output
    shown = yaml.safe_load(as_yaml.stdout)
    assert shown == json.loads(as_json.stdout)
    assert shown["kafka"]["sasl_password"] == "**********"
    assert shown["kafka"]["ssl_key_password"] == "**********"
    assert shown["sinks"]["pg"]["dsn"] == "**********"
    assert shown["http"]["port"] == 9123
    assert shown["schema_registry"]["basic_auth_password"] == "**********"
    assert shown["schema_registry"]["ssl_key_password"] == "**********"


def test_schema_is_json_schema(runner: CliRunner) -> None:
    result = invoke(runner, "schema")
    assert result.exit_code == 0
    schema = json.loads(result.stdout)
    assert schema["title"] == "Settings"
    assert "kafka" in schema["required"]


@pytest.mark.parametrize("args", [[], ["validate"], ["show"], ["schema"]])
def test_help_has_examples(runner: CliRunner, args: list[str]) -> None:
    result = invoke(runner, *args, "--help")
    assert result.exit_code == 0
    assert "Example" in result.stdout
    assert "dstreams config" in result.stdout
