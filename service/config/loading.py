"""The raw layers of the configuration: YAML files and `DSTREAMS_A__B` environment variables.

Each reader returns plain nested dicts; `service.config.settings` merges them (later layers win) and
validates the result once, so every problem is reported together with its field path.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Hashable, Mapping
from pathlib import Path
from typing import Any

import yaml

from service.config.problems import InvalidConfig

ENV_PREFIX = "DSTREAMS_"
ENV_NESTING = "__"
# Variables with the prefix that are not settings: the path of the file itself.
NOT_SETTINGS = frozenset({"DSTREAMS_CONFIG"})

Path_ = tuple[str, ...]


class _StrictLoader(yaml.SafeLoader):
    """A safe loader that refuses duplicate keys, which PyYAML would otherwise silently drop."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Hashable, Any]:
        first_line: dict[tuple[str, str], int] = {}
        for key_node, _ in node.value:
            if not isinstance(key_node, yaml.ScalarNode):
                continue
            key = (key_node.tag, key_node.value)
            if key in first_line:
                msg = f"duplicate key {key_node.value!r} (first given on line {first_line[key]})"
                raise yaml.constructor.ConstructorError(None, None, msg, key_node.start_mark)
            first_line[key] = key_node.start_mark.line + 1
        return super().construct_mapping(node, deep=deep)


def read_yaml(path: Path) -> dict[str, Any]:
    """The mapping in a YAML file; every way it can be unusable is an `InvalidConfig`."""
    text = _read_text(path)
    try:
        data = yaml.load(text, Loader=_StrictLoader)  # noqa: S506 - _StrictLoader is a SafeLoader
    except yaml.MarkedYAMLError as exc:
        raise InvalidConfig([_yaml_problem(path, exc)]) from None
    except yaml.YAMLError as exc:
        raise InvalidConfig([f"{path}: invalid YAML: {exc}"]) from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        found = type(data).__name__
        msg = f"{path}: expected a mapping of settings at the top level, found a {found}"
        raise InvalidConfig([msg])
    odd = [key for key in data if not isinstance(key, str)]
    if odd:
        msg = f"{path}: top-level keys {odd!r} are not names; expected keys such as app_id, kafka"
        raise InvalidConfig([msg])
    return data


def _read_text(path: Path) -> str:
    if not path.exists():
        msg = f"{path}: config file not found; pass --config with the path of an existing YAML file"
        raise InvalidConfig([msg])
    if path.is_dir():
        raise InvalidConfig([f"{path}: is a directory; expected a YAML file"])
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidConfig([f"{path}: cannot be read: {exc}"]) from None


def _yaml_problem(path: Path, exc: yaml.MarkedYAMLError) -> str:
    mark = exc.problem_mark or exc.context_mark
    where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else str(path)
    problem = exc.problem or exc.context or "unreadable"
    context = f" ({exc.context})" if exc.context and exc.problem else ""
    return f"{where}: invalid YAML: {problem}{context}"


def read_env(
    environ: Mapping[str, str], top_level: Collection[str]
) -> tuple[dict[str, Any], dict[Path_, str]]:
    """Settings given as `DSTREAMS_A__B=value`, nested by `__`, with the variable behind each path.

    Names are lower-cased (`DSTREAMS_HTTP__PORT` sets `http.port`). A variable without `__` that
    names no top-level setting (`DSTREAMS_CRASH_AT`, used by tests and tools) is not a setting;
    one with `__` always is, so a misspelt section is reported rather than ignored.

    A value that starts with `[` or `{`, or is `null`, is parsed as JSON so lists and maps can be
    given; anything else stays a string and is converted by the models (`"8080"` becomes an int
    where an int is expected).
    """
    data: dict[str, Any] = {}
    origins: dict[Path_, str] = {}
    problems: list[str] = []
    for name in sorted(environ):
        if not name.startswith(ENV_PREFIX) or name in NOT_SETTINGS:
            continue
        path = tuple(part.lower() for part in name[len(ENV_PREFIX) :].split(ENV_NESTING))
        if len(path) == 1 and path[0] not in top_level:
            continue
        try:
            _put(data, path, _env_value(name, environ[name]), name)
        except ValueError as exc:
            problems.append(str(exc))
            continue
        origins[path] = name
    if problems:
        raise InvalidConfig(problems)
    return data, origins


def _env_value(name: str, raw: str) -> Any:
    text = raw.strip()
    if not (text.startswith(("[", "{")) or text == "null"):
        return raw
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        msg = f"{name}: not valid JSON ({exc.msg} at column {exc.colno}); lists and maps are JSON"
        raise ValueError(msg) from None


def _put(data: dict[str, Any], path: Path_, value: Any, name: str) -> None:
    if not all(path):
        msg = f"{name}: empty name between '{ENV_NESTING}'s; expected e.g. DSTREAMS_HTTP__PORT"
        raise ValueError(msg)
    node = data
    for part in path[:-1]:
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            msg = f"{name}: conflicts with another variable that sets {part!r} to a single value"
            raise ValueError(msg)
        node = child
    if isinstance(node.get(path[-1]), dict):
        msg = f"{name}: conflicts with variables that set keys inside {path[-1]!r}"
        raise ValueError(msg)
    node[path[-1]] = value


def deep_merge(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    """`base` with `override` on top; maps merge key by key, anything else is replaced.

    A map that names a different `type` than the map below replaces it whole: the keys of one
    kind of sink or journal mean nothing to another, and would only be refused as unknown.

    >>> below = {"journal": {"type": "file", "path": "state/journal"}}
    >>> deep_merge(below, {"journal": {"type": "kafka", "topic": "j"}})
    {'journal': {'type': 'kafka', 'topic': 'j'}}
    >>> deep_merge(below, {"journal": {"path": "/data"}})
    {'journal': {'type': 'file', 'path': '/data'}}
    """
    merged = dict(base)
    for key, value in override.items():
        below = merged.get(key)
        if isinstance(below, Mapping) and isinstance(value, Mapping) and _same_kind(below, value):
            merged[key] = deep_merge(below, value)
        else:
            merged[key] = value
    return merged


def _same_kind(below: Mapping[str, Any], above: Mapping[str, Any]) -> bool:
    return "type" not in above or below.get("type", above["type"]) == above["type"]
