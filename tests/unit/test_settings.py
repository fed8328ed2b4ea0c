"""Configuration: layering, value types and one clear message per problem."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from service.config.settings import (
    DEFAULTS_FILE,
    InvalidConfig,
    KafkaSinkSettings,
    Settings,
    json_schema,
    load_settings,
)
from service.errors import ConfigError

CANARY = "canary-Zq8xT3"
MINIMAL = """\
app_id: wordcount
job: examples.wordcount:build
kafka:
  bootstrap_servers: localhost:9092
sources:
  words: {topics: [words]}
sinks:
  counts: {type: kafka, topic: counts}
"""


def write(tmp_path: Path, text: str, name: str = "job.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def problems(tmp_path: Path, text: str, environ: dict[str, str] | None = None) -> list[str]:
    with pytest.raises(InvalidConfig) as caught:
        load_settings(write(tmp_path, text), environ or {})
    return list(caught.value.problems)


def with_minimal(**changes: Any) -> str:
    data = yaml.safe_load(MINIMAL)
    data.update(changes)
    return yaml.safe_dump(data)


# --- Loading and layering --------------------------------------------------------------------


def test_minimal_file_gets_every_default(tmp_path: Path) -> None:
    settings = load_settings(write(tmp_path, MINIMAL), {})
    assert settings.app_id == "wordcount"
    assert settings.batch_interval_ms == 1000
    assert settings.default_partitions is None  # each batch sized by service.graph.layout
    assert settings.fixed_partitions == 4
    assert settings.spark.master == "local[2]"
    assert settings.http.port == 8080
    assert settings.journal.type == "file"
    assert settings.checkpoint.interval_batches is None
    assert settings.sources["words"].starting_offsets == "latest"
    assert settings.sinks["counts"].type == "kafka"


def test_defaults_file_states_exactly_the_built_in_defaults(tmp_path: Path) -> None:
    with_file = load_settings(write(tmp_path, MINIMAL), {})
    without_file = load_settings(write(tmp_path, MINIMAL), {}, defaults=None)
    assert DEFAULTS_FILE.exists()
    assert with_file == without_file


def test_env_beats_file_and_file_beats_defaults(tmp_path: Path) -> None:
    path = write(tmp_path, MINIMAL + "http: {port: 9000, host: 127.0.0.1}\n")
    environ = {"DSTREAMS_HTTP__PORT": "9100", "DSTREAMS_BATCH_INTERVAL": "2s"}
    settings = load_settings(path, environ)
    assert settings.http.port == 9100  # env over file
    assert settings.http.host == "127.0.0.1"  # file over defaults, sibling kept
    assert settings.batch_interval_ms == 2000
    assert settings.checkpoint.interval_batches is None  # defaults


def test_env_maps_merge_key_by_key_and_lists_can_be_json_or_commas(tmp_path: Path) -> None:
    path = write(tmp_path, MINIMAL.replace("localhost:9092", "a:1\n  properties: {linger.ms: 5}"))
    environ = {
        "DSTREAMS_KAFKA__PROPERTIES": '{"security.protocol": "SSL"}',
        "DSTREAMS_SOURCES__WORDS__TOPICS": "words,more",
        "DSTREAMS_SINKS__COUNTS__PARTITIONS": "6",
        "DSTREAMS_SOURCES__OTHER__PATTERN": "other-.*",
        "DSTREAMS_CONFIG": "ignored.yaml",
        "DSTREAMS_CRASH_AT": "not-a-setting",
    }
    settings = load_settings(path, environ)
    assert settings.kafka.properties == {"linger.ms": "5", "security.protocol": "SSL"}
    assert settings.sources["words"].topics == ["words", "more"]
    assert settings.sources["other"].pattern == "other-.*"
    sink = settings.sinks["counts"]
    assert isinstance(sink, KafkaSinkSettings) and sink.partitions == 6


def test_config_from_environment_alone() -> None:
    environ = {
        "DSTREAMS_APP_ID": "envonly",
        "DSTREAMS_JOB": "jobs.main:build",
        "DSTREAMS_KAFKA__BOOTSTRAP_SERVERS": "kafka:9092",
    }
    assert load_settings(None, environ).app_id == "envonly"


def test_batch_interval_accepts_durations(tmp_path: Path) -> None:
    for given, millis in [
        ("1s", 1000),
        ("250ms", 250),
        ("1.5s", 1500),
        ("2m", 120_000),
        (700, 700),
    ]:
        text = MINIMAL + f"batch_interval: {json.dumps(given)}\n"
        assert load_settings(write(tmp_path, text), {}).batch_interval_ms == millis


def test_starting_offsets_forms(tmp_path: Path) -> None:
    for given, expected in [
        ("earliest", "earliest"),
        (1_700_000_000_000, 1_700_000_000_000),
        ({"words:0": 5, "words:1": 0}, {"words:0": 5, "words:1": 0}),
    ]:
        sources = {"words": {"topics": ["words"], "starting_offsets": given}}
        settings = load_settings(write(tmp_path, with_minimal(sources=sources)), {})
        assert settings.sources["words"].starting_offsets == expected


def test_settings_are_frozen(tmp_path: Path) -> None:
    settings = load_settings(write(tmp_path, MINIMAL), {})
    with pytest.raises(ValidationError):
        settings.app_id = "other"


def test_invalid_config_is_a_config_error() -> None:
    assert issubclass(InvalidConfig, ConfigError)


# --- One message per problem -----------------------------------------------------------------


def test_bad_discriminator_value_names_path_value_and_choices(tmp_path: Path) -> None:
    text = MINIMAL.replace("type: kafka", "type: kafak")
    assert problems(tmp_path, text) == [
        "sinks.counts.type: 'kafak' is not one of kafka, postgres, files, console"
    ]


def test_bad_literal_value(tmp_path: Path) -> None:
    assert problems(tmp_path, MINIMAL + "logging: {format: xml}\n") == [
        "logging.format: 'xml' is not one of json, text, auto"
    ]


def test_missing_required_fields(tmp_path: Path) -> None:
    text = "job: examples.wordcount:build\nsinks: {c: {type: kafka}, d: {}}\n"
    assert problems(tmp_path, text) == [
        "app_id: required but missing",
        "kafka: required but missing",
        "sinks.c.topic: required but missing",
        "sinks.d.type: required but missing; expected one of kafka, postgres, files, console",
    ]


def test_unknown_keys_are_errors_with_a_suggestion(tmp_path: Path) -> None:
    text = MINIMAL.replace("bootstrap_servers", "bootstrap_server") + "colour: blue\n"
    found = problems(tmp_path, text)
    assert found[0] == "kafka.bootstrap_servers: required but missing"
    assert found[1].startswith("kafka.bootstrap_server: unknown key; allowed keys are ")
    assert found[1].endswith("did you mean 'bootstrap_servers'?")
    assert found[2].startswith("colour: unknown key; allowed keys are app_id, job,")


def test_unknown_key_inside_a_union_member(tmp_path: Path) -> None:
    text = MINIMAL.replace("topic: counts", "topic: counts, topik: x")
    assert problems(tmp_path, text) == [
        "sinks.counts.topik: unknown key; allowed keys are type, topic, partitions, "
        "replication_factor, transaction_timeout_ms, format, avro, write_from, outage_limit_ms; "
        "did you mean 'topic'?"
    ]


def test_yaml_syntax_error_has_file_line_and_column(tmp_path: Path) -> None:
    found = problems(tmp_path, "app_id: x\njob: [a, b\nkafka: {}\n")
    assert len(found) == 1
    assert found[0].startswith(f"{tmp_path / 'job.yaml'}:")
    assert ": invalid YAML: " in found[0]
    line = int(found[0].split(":")[1])
    assert line in (2, 3)


def test_duplicate_yaml_key_is_an_error(tmp_path: Path) -> None:
    found = problems(tmp_path, "app_id: a\njob: m:f\napp_id: b\n")
    assert found == [
        f"{tmp_path / 'job.yaml'}:3:1: invalid YAML: duplicate key 'app_id' (first given on line 1)"
    ]


def test_top_level_must_be_a_mapping(tmp_path: Path) -> None:
    assert problems(tmp_path, "- a\n- b\n") == [
        f"{tmp_path / 'job.yaml'}: expected a mapping of settings at the top level, found a list"
    ]
    assert problems(tmp_path, MINIMAL + "1: one\n") == [
        f"{tmp_path / 'job.yaml'}: top-level keys [1] are not names; "
        "expected keys such as app_id, kafka"
    ]


def test_bad_duration(tmp_path: Path) -> None:
    found = problems(tmp_path, MINIMAL + "batch_interval: 1 parsec\n")
    assert found == [
        "batch_interval_ms: '1 parsec' is not a duration; expected whole milliseconds (e.g. 500) "
        "or a number with a unit ms, s, m or h (e.g. 500ms, 1s, 2m)"
    ]
    assert problems(tmp_path, MINIMAL + "batch_interval_ms: 0\n") == [
        "batch_interval_ms: 0 is invalid; expected greater than 0"
    ]


def test_missing_file(tmp_path: Path) -> None:
    missing = tmp_path / "nope.yaml"
    with pytest.raises(InvalidConfig) as caught:
        load_settings(missing, {})
    assert caught.value.problems == (
        f"{missing}: config file not found; pass --config with the path of an existing YAML file",
    )


def test_bad_env_value_names_the_variable(tmp_path: Path) -> None:
    found = problems(tmp_path, MINIMAL, {"DSTREAMS_HTTP__PORT": "eighty"})
    assert found == [
        "http.port: 'eighty' is invalid; expected a valid integer, unable to parse string as an "
        "integer (set by DSTREAMS_HTTP__PORT)"
    ]
    assert problems(tmp_path, MINIMAL, {"DSTREAMS_SPARK__CONF": "{oops"})[0].startswith(
        "DSTREAMS_SPARK__CONF: not valid JSON"
    )
    assert problems(tmp_path, MINIMAL, {"DSTREAMS_HTPP__PORT": "1"})[0].startswith(
        "htpp: unknown key; allowed keys are app_id, "
    )


def test_every_problem_is_reported_at_once(tmp_path: Path) -> None:
    text = """\
app_id: "my app"
job: wordcount
kafka: {bootstrap_servers: x}
sources:
  a: {topics: [a], pattern: "b.*"}
  b: {topics: [b], starting_offsets: earlist}
  c: {pattern: "("}
sinks:
  pg: {type: postgres, dsn: "postgresql://x", table: "t; drop", columns: [a], key_columns: [b]}
journal: {type: kafka, replication_factor: 1, min_insync_replicas: 2}
http: {port: 70000}
"""
    found = problems(tmp_path, text)
    assert found == [
        "app_id: 'my app' is not a valid name; use 1 to 100 letters, digits, '-' or '_'",
        "job: 'wordcount' is not of the form module:function; "
        "expected e.g. examples.wordcount:build",
        "sources.a: give exactly one of topics or pattern; found both",
        "sources.b.starting_offsets: 'earlist' is not one of earliest, latest, committed, "
        'a timestamp in milliseconds, or a map "topic:partition" -> offset',
        "sources.c.pattern: '(' is not a valid regular expression: "
        "missing ), unterminated subpattern at position 0",
        "sinks.pg.table: 't; drop' is not a plain SQL identifier; "
        "expected e.g. counts or public.counts",
        "journal: topic is required when type is kafka",
        "http.port: 70000 is invalid; expected less than or equal to 65535",
    ]


def test_postgres_column_types_cover_the_columns(tmp_path: Path) -> None:
    sink = {"type": "postgres", "dsn": "x", "table": "t", "columns": ["w", "n"]}
    ok = with_minimal(sinks={"pg": {**sink, "column_types": {"w": "text", "n": "bigint"}}})
    assert load_settings(write(tmp_path, ok), {}).sinks["pg"].type == "postgres"
    bad = with_minimal(sinks={"pg": {**sink, "column_types": {"w": "text"}}})
    assert problems(tmp_path, bad) == [
        "sinks.pg: column_types must name exactly the columns ['w', 'n']; found ['w']"
    ]


def test_names_of_sources_and_sinks_are_checked(tmp_path: Path) -> None:
    text = with_minimal(sinks={"my output": {"type": "console"}})
    assert problems(tmp_path, text) == [
        """sinks["my output"]: 'my output' is not a valid name; use 1 to 100 letters, digits, """
        "'-' or '_'"
    ]


def test_starting_offsets_errors(tmp_path: Path) -> None:
    cases = {
        1_700_000_000: "1700000000 is not a timestamp in milliseconds",
        json.dumps({"words": 1}): "'words' is not of the form topic:partition",
        json.dumps({"other:0": 1}): "starting_offsets names topics not in topics: other",
    }
    for given, expected in cases.items():
        text = MINIMAL.replace(
            "{topics: [words]}", f"{{topics: [words], starting_offsets: {given}}}"
        )
        (found,) = problems(tmp_path, text)
        assert expected in found


def test_max_partitions_below_min_partitions_is_refused(tmp_path: Path) -> None:
    text = MINIMAL.replace(
        "{topics: [words]}", "{topics: [words], min_partitions: 4, max_partitions: 2}"
    )
    (found,) = problems(tmp_path, text)
    assert found.startswith("sources.words")
    assert "max_partitions (2) is below min_partitions (4)" in found


# --- Secrets ---------------------------------------------------------------------------------

SECRETS = f"""\
app_id: wordcount
job: examples.wordcount:build
spark:
  secret_conf: {{spark.hadoop.fs.s3a.secret.key: {CANARY}}}
kafka:
  bootstrap_servers: localhost:9092
  properties: {{security.protocol: SASL_SSL, sasl.username: dstreams}}
  sasl_password: {CANARY}
  ssl_key_password: {CANARY}
  secret_properties: {{sasl.oauthbearer.client.secret: {CANARY}}}
sinks:
  pg: {{type: postgres, dsn: "postgresql://u:{CANARY}@db/x", table: t, columns: [a]}}
"""


def test_secrets_are_masked_in_masked_dict_and_repr(tmp_path: Path) -> None:
    settings = load_settings(write(tmp_path, SECRETS), {})
    shown = json.dumps(settings.masked_dict())
    assert CANARY not in shown
    assert CANARY not in repr(settings) and CANARY not in str(settings)
    assert shown.count("**********") == 5


def test_secrets_are_revealed_only_for_the_clients(tmp_path: Path) -> None:
    settings = load_settings(write(tmp_path, SECRETS), {})
    conf = settings.kafka.librdkafka_config()
    assert conf["bootstrap.servers"] == "localhost:9092"
    assert conf["security.protocol"] == "SASL_SSL"
    assert conf["sasl.password"] == CANARY
    assert conf["ssl.key.password"] == CANARY
    assert conf["sasl.oauthbearer.client.secret"] == CANARY
    assert settings.spark.spark_conf()["spark.hadoop.fs.s3a.secret.key"] == CANARY


def test_secret_from_env_is_masked_too(tmp_path: Path) -> None:
    settings = load_settings(write(tmp_path, MINIMAL), {"DSTREAMS_KAFKA__SASL_PASSWORD": CANARY})
    assert CANARY not in json.dumps(settings.masked_dict())
    assert settings.kafka.librdkafka_config()["sasl.password"] == CANARY


def test_secrets_never_appear_in_error_messages(tmp_path: Path) -> None:
    text = SECRETS.replace(f"sasl_password: {CANARY}", f"sasl_pasword: {CANARY}")
    text = text.replace(f'dsn: "postgresql://u:{CANARY}@db/x"', f"dsn: [{CANARY}]")
    text += f"dead_letter: {{topic: {CANARY}, partitions: {CANARY}}}\n"
    environ = {"DSTREAMS_KAFKA__SSL_KEY_PASSWORD": "[1, 2]"}
    found = problems(tmp_path, text, environ)
    joined = "\n".join(found)
    assert "kafka.sasl_pasword: unknown key" in joined
    assert "sinks.pg.dsn: " in joined
    assert "kafka.ssl_key_password: '**********' is invalid" in joined
    # Only the deliberately non-secret field shows its value.
    assert joined.count(CANARY) == 1 and "dead_letter.partitions: 'canary" in joined


def test_credentials_in_plain_maps_are_refused(tmp_path: Path) -> None:
    text = MINIMAL.replace(
        "localhost:9092",
        f"localhost:9092\n  properties: {{sasl.password: {CANARY}, group.id: g}}",
    )
    (found,) = problems(tmp_path, text)
    assert found.startswith("kafka.properties: 'group.id' is managed by dstreams")
    assert "'sasl.password': credentials belong in kafka.secret_properties" in found
    assert CANARY not in found


# --- Schema ----------------------------------------------------------------------------------


def test_json_schema_describes_the_file() -> None:
    schema = json_schema()
    json.dumps(schema)
    assert schema["$schema"].startswith("https://json-schema.org/")
    assert set(schema["required"]) == {"app_id", "job", "kafka"}
    assert schema["additionalProperties"] is False
    assert "sinks" in schema["properties"] and "backpressure" in schema["properties"]
    assert Settings.model_fields["app_id"].description
