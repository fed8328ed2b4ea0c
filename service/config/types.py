"""Value types of the configuration: names, durations, Kafka offsets, conf maps.

Each checker raises `ValueError` with a message that shows the bad value and what is allowed;
`service.config.problems` prefixes it with the field path.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BeforeValidator, Field, WithJsonSchema

from connectors.planner import StartingOffsets

# Keys of librdkafka and Spark maps that hold credentials (Spark's own `spark.redaction.regex`,
# plus librdkafka's private-key and OAuth settings). They belong in the secret maps instead.
_SENSITIVE_KEY = re.compile(
    r"secret|password|token|access[.]key|key[.]pem|jaas|oauthbearer[.]config", re.I
)
# librdkafka properties dstreams sets itself: exactly-once depends on their values.
MANAGED_KAFKA_KEYS = {
    "bootstrap.servers": "set kafka.bootstrap_servers instead",
    "group.id": "set sources.<name>.group_id instead",
    "transactional.id": "dstreams derives it from app_id, output and partition",
    "enable.auto.commit": "dstreams commits offsets itself after each batch",
    "isolation.level": "dstreams always reads with read_committed",
}
_NAME = re.compile(r"[A-Za-z0-9_-]{1,100}")
_JOB = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*")
_TOPIC = re.compile(r"[A-Za-z0-9._-]{1,249}")
_SQL_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_DURATION = re.compile(r"(\d+(?:\.\d+)?)\s*(ms|s|m|h)?")
_MS_PER_UNIT = {None: 1, "ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000}


def _check_name(value: str) -> str:
    if not _NAME.fullmatch(value):
        msg = f"{value!r} is not a valid name; use 1 to 100 letters, digits, '-' or '_'"
        raise ValueError(msg)
    return value


def check_job(value: str) -> str:
    if not _JOB.fullmatch(value):
        msg = (
            f"{value!r} is not of the form module:function; expected e.g. examples.wordcount:build"
        )
        raise ValueError(msg)
    return value


def _check_topic(value: str) -> str:
    if not _TOPIC.fullmatch(value) or value in (".", ".."):
        msg = f"{value!r} is not a valid Kafka topic name; use 1 to 249 of A-Z a-z 0-9 . _ -"
        raise ValueError(msg)
    return value


def _check_sql_name(value: str) -> str:
    # Table and column names are put into SQL text, so only plain identifiers are accepted.
    if not all(_SQL_NAME.fullmatch(part) for part in value.split(".", 1)):
        msg = f"{value!r} is not a plain SQL identifier; expected e.g. counts or public.counts"
        raise ValueError(msg)
    return value


def parse_duration_ms(value: Any) -> Any:
    """Milliseconds from `1500`, `"1500"`, `"500ms"`, `"1.5s"`, `"2m"` or `"1h"`."""
    if isinstance(value, bool):
        pass
    elif isinstance(value, int):
        return value
    elif isinstance(value, float) and value.is_integer():
        return int(value)
    elif isinstance(value, str) and (match := _DURATION.fullmatch(value.strip())):
        millis = float(match.group(1)) * _MS_PER_UNIT[match.group(2)]
        if math.isclose(millis, round(millis)):
            return round(millis)
    msg = (
        f"{value!r} is not a duration; expected whole milliseconds (e.g. 500) "
        "or a number with a unit ms, s, m or h (e.g. 500ms, 1s, 2m)"
    )
    raise ValueError(msg)


def _conf_scalar(value: Any) -> Any:
    """YAML gives `linger.ms: 5` and `enable.idempotence: true`; both maps hold strings."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    return value


def _comma_list(value: Any) -> Any:
    """Environment variables give lists as `a,b` as well as JSON."""
    if isinstance(value, str):
        return [part.strip() for part in value.split(",") if part.strip()]
    return value


def upper_case(value: Any) -> Any:
    return value.upper() if isinstance(value, str) else value


Name = Annotated[str, AfterValidator(_check_name)]
TopicName = Annotated[str, AfterValidator(_check_topic)]
SqlName = Annotated[str, AfterValidator(_check_sql_name)]
DurationMs = Annotated[
    int,
    BeforeValidator(parse_duration_ms),
    Field(gt=0),
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "integer", "exclusiveMinimum": 0},
                {"type": "string", "pattern": r"^\s*\d+(\.\d+)?\s*(ms|s|m|h)?\s*$"},
            ],
            "description": "milliseconds, or a duration such as 500ms, 1s, 2m, 1h",
        }
    ),
]
ConfValue = Annotated[
    str, BeforeValidator(_conf_scalar, json_schema_input_type=str | int | float | bool)
]
TopicList = Annotated[list[TopicName], BeforeValidator(_comma_list), Field(min_length=1)]
SqlNames = Annotated[list[SqlName], BeforeValidator(_comma_list)]
LogLevel = Annotated[
    Literal["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"], BeforeValidator(upper_case)
]
StartingOffsetsSetting = Literal["earliest", "latest", "committed"] | int | dict[str, int]
"""`starting_offsets` as written: a policy, a timestamp in ms, or `{"topic:partition": offset}`."""


def sensitive_keys(conf: Mapping[str, str], secret_map: str) -> list[str]:
    found = sorted(key for key in conf if _SENSITIVE_KEY.search(key))
    if not found:
        return []
    names = ", ".join(repr(key) for key in found)
    return [f"{names}: credentials belong in {secret_map}, which is masked when shown"]


def raise_all(problems: list[str]) -> None:
    if problems:
        msg = "; ".join(problems)
        raise ValueError(msg)


def parse_starting_offsets(value: object) -> StartingOffsetsSetting:
    """One of the policies, a timestamp in ms, or `{"topic:partition": offset}`.

    A timestamp may come as a string of digits (from an environment variable).
    """
    if value == "earliest" or value == "latest" or value == "committed":
        return value
    if isinstance(value, str) and value.isdigit():
        value = int(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return _timestamp_ms(value)
    if isinstance(value, Mapping) and value:
        return {str(key): _offset_at(str(key), offset) for key, offset in value.items()}
    msg = (
        f"{value!r} is not one of earliest, latest, committed, a timestamp in milliseconds, "
        'or a map "topic:partition" -> offset'
    )
    raise ValueError(msg)


def starting_offsets_for_planner(setting: StartingOffsetsSetting) -> StartingOffsets:
    """A checked setting (see `parse_starting_offsets`) in the planner's terms.

    >>> starting_offsets_for_planner({"words:1": 5}).offsets
    {('words', 1): 5}
    >>> starting_offsets_for_planner("committed") == StartingOffsets.committed()
    True
    """
    if setting == "earliest":
        return StartingOffsets.earliest()
    if setting == "latest":
        return StartingOffsets.latest()
    if setting == "committed":
        return StartingOffsets.committed()
    if isinstance(setting, int):
        return StartingOffsets.at_timestamp(setting)
    return StartingOffsets.explicit(
        dict(_topic_partition(key, offset) for key, offset in setting.items())
    )


def _topic_partition(key: str, offset: int) -> tuple[tuple[str, int], int]:
    topic, _, partition = key.rpartition(":")
    return (topic, int(partition)), offset


def _timestamp_ms(value: int) -> int:
    if value < 10**11:
        msg = (
            f"{value} is not a timestamp in milliseconds (it would be before 1973); seconds * 1000?"
        )
        raise ValueError(msg)
    return value


def _offset_at(key: str, offset: Any) -> int:
    topic, _, partition = key.rpartition(":")
    if not topic or not partition.isdigit():
        msg = f"{key!r} is not of the form topic:partition"
        raise ValueError(msg)
    if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
        msg = f"offset of {key!r} is {offset!r}; expected an integer >= 0"
        raise ValueError(msg)
    return int(offset)
