"""Turns pydantic's validation errors into one line per problem a person can act on.

Each line names the field path as written in the YAML file (`sinks.counts.type`), the bad value
(masked when the field is a secret) and what is allowed, e.g.
``sinks.counts.type: 'kafak' is not one of kafka, postgres, files, console``.
"""

from __future__ import annotations

import difflib
import re
import types
from collections.abc import Iterable, Mapping, Sequence
from typing import Annotated, Any, Union, get_args, get_origin

from pydantic import BaseModel, SecretStr, ValidationError
from pydantic_core import ErrorDetails

from service.errors import ConfigError

MASK = "'**********'"
Segment = str | int
_PLAIN_SEGMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*")
# Names that hold secrets even where the model cannot be followed (e.g. a malformed union member).
_SECRET_WORDS = re.compile(r"password|secret|dsn|token", re.IGNORECASE)


class InvalidConfig(ConfigError):
    """The configuration has problems; `problems` holds one line for each."""

    def __init__(self, problems: Sequence[str]) -> None:
        self.problems: tuple[str, ...] = tuple(problems)
        super().__init__("\n".join(self.problems))


def problems_of(
    exc: ValidationError,
    model: type[BaseModel],
    data: Mapping[str, Any],
    origins: Mapping[tuple[str, ...], str],
) -> list[str]:
    """One line per error in `exc`, raised by validating `data` against `model`.

    `origins` maps paths that came from environment variables to the variable, so a problem says
    where to fix it.
    """
    lines: list[str] = []
    for error in exc.errors(include_url=False):
        path = _clean_path(error["loc"], data)
        # A bad or missing `type` is reported at the union's path, but set at its `type` key.
        tagged = error["type"] in ("union_tag_invalid", "union_tag_not_found")
        line = _describe(error, path, model, data) + _origin_note(
            [*path, "type"] if tagged else path, origins
        )
        if line not in lines:
            lines.append(line)
    return lines


def render_path(path: Sequence[Segment]) -> str:
    """`kafka.properties["sasl.password"]`, `sources.words.topics[0]`."""
    text = ""
    for segment in path:
        if isinstance(segment, int):
            text += f"[{segment}]"
        elif _PLAIN_SEGMENT.fullmatch(segment):
            text += f".{segment}" if text else segment
        else:
            text += f'["{segment}"]'
    return text or "(top level)"


def _clean_path(loc: Iterable[Segment], data: Any) -> list[Segment]:
    """The loc of an error with pydantic's additions removed, walking the input alongside.

    Pydantic inserts the tag of a discriminated union (`sinks.c.kafka.topic`) and `[key]` for a
    bad dict key; neither is a key the user wrote.
    """
    path: list[Segment] = []
    node = data
    for segment in loc:
        if segment == "[key]":
            break
        if isinstance(node, Mapping) and segment in node:
            node = node[segment]
        elif isinstance(node, list) and isinstance(segment, int) and segment < len(node):
            node = node[segment]
        elif isinstance(node, Mapping) and node.get("type") == segment:
            continue
        else:
            node = None
        path.append(segment)
    return path


def _describe(error: ErrorDetails, path: list[Segment], model: type[BaseModel], data: Any) -> str:
    kind = error["type"]
    where = render_path(path)
    context = error.get("ctx") or {}
    if kind == "missing":
        return f"{where}: required but missing"
    if kind == "extra_forbidden":
        return f"{where}: unknown key{_allowed_keys(path, model, data)}"
    if kind == "union_tag_invalid":
        tags = _quoted_words(str(context.get("expected_tags", "")))
        return f"{render_path([*path, 'type'])}: {context.get('tag')!r} is not one of {tags}"
    if kind == "union_tag_not_found":
        tags = ", ".join(_union_tags(annotation_at(model, path, data)))
        return f"{render_path([*path, 'type'])}: required but missing; expected one of {tags}"
    shown = _show(error.get("input"), _is_secret(path, model, data))
    if kind == "literal_error":
        return f"{where}: {shown} is not one of {_quoted_words(str(context.get('expected')))}"
    if kind in ("value_error", "assertion_error"):
        return f"{where}: {error['msg'].split(', ', 1)[-1]}"
    expected = error["msg"].replace("Input should be ", "expected ", 1)
    return f"{where}: {shown} is invalid; {expected[:1].lower()}{expected[1:]}"


def _origin_note(path: Sequence[Segment], origins: Mapping[tuple[str, ...], str]) -> str:
    key = tuple(str(segment) for segment in path)
    for length in range(len(key), 0, -1):
        name = origins.get(key[:length])
        if name is not None:
            return f" (set by {name})"
    return ""


def _show(value: Any, secret: bool) -> str:
    """The bad value for a message: secrets masked, containers summarised, long text cut."""
    if secret:
        return MASK
    if isinstance(value, Mapping) and value:
        return "a mapping"
    if isinstance(value, list | tuple) and value:
        return "a list"
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _quoted_words(expected: str) -> str:
    """`'a', 'b' or 'c'` (pydantic's wording) as `a, b, c`."""
    words = re.findall(r"'([^']*)'", expected)
    return ", ".join(words) if words else expected


def _allowed_keys(path: list[Segment], model: type[BaseModel], data: Any) -> str:
    parent = annotation_at(model, path[:-1], data)
    if not (isinstance(parent, type) and issubclass(parent, BaseModel)):
        return ""
    allowed = list(parent.model_fields)
    guess = difflib.get_close_matches(str(path[-1]), allowed, n=1)
    hint = f"; did you mean {guess[0]!r}?" if guess else ""
    return f"; allowed keys are {', '.join(allowed)}{hint}"


def _is_secret(path: list[Segment], model: type[BaseModel], data: Any) -> bool:
    if any(_SECRET_WORDS.search(str(segment)) for segment in path):
        return True
    annotation = annotation_at(model, path, data)
    return annotation is SecretStr or SecretStr in _members(annotation)


def annotation_at(model: type[BaseModel], path: Sequence[Segment], data: Any) -> Any:
    """The type expected at `path`, choosing union members by the `type` found in `data`."""
    annotation: Any = model
    node = data
    for segment in path:
        annotation = _narrow(annotation, node)
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            field = annotation.model_fields.get(str(segment))
            if field is None:
                return None
            annotation = field.annotation
        elif get_origin(annotation) in (dict, list):
            annotation = get_args(annotation)[-1]
        else:
            return None
        node = node.get(segment) if isinstance(node, Mapping) else None
    return _narrow(annotation, node)


def _narrow(annotation: Any, node: Any) -> Any:
    """Strip `Annotated` and `X | None`; pick the union member whose `type` matches the data."""
    if get_origin(annotation) is Annotated:
        return _narrow(get_args(annotation)[0], node)
    members = _members(annotation)
    if not members:
        return annotation
    if len(members) == 1:
        return _narrow(members[0], node)
    tag = node.get("type") if isinstance(node, Mapping) else None
    for member in members:
        if tag is not None and tag in _union_tags(member):
            return member
    return annotation


def _members(annotation: Any) -> list[Any]:
    if get_origin(annotation) not in (Union, types.UnionType):
        return []
    return [arg for arg in get_args(annotation) if arg is not type(None)]


def _union_tags(annotation: Any) -> list[str]:
    """The `type` literals of a discriminated union (or of one model in it)."""
    annotation = annotation if _members(annotation) else _narrow(annotation, None)
    models = _members(annotation) or [annotation]
    tags: list[str] = []
    for member in models:
        if isinstance(member, type) and issubclass(member, BaseModel):
            field = member.model_fields.get("type")
            if field is not None:
                tags.extend(str(arg) for arg in get_args(field.annotation))
    return tags
