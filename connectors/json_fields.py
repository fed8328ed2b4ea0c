"""JSON objects of flat dataclasses: one key per field, in field order, some keys renamed.

Offset ranges, batch keys and journal records travel as JSON whose keys are their fields' names
(docs/architecture.md, "The journal"); writing that mapping out by hand in each class let the
keys and the fields drift apart. It lives in `connectors` because it is the lowest package that
both `sinks` and the rest of `service` import.

>>> from dataclasses import dataclass
>>> @dataclass(frozen=True)
... class Span:
...     name: str
...     from_ms: int
>>> fields_to_json(Span("a", 5), {"from_ms": "from"})
{'name': 'a', 'from': 5}
>>> fields_from_json(Span, {"name": "a", "from": "5"}, {"from_ms": "from"})
Span(name='a', from_ms=5)
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, Self, TypeVar

T = TypeVar("T")

# Most classes keep every field's name as its key.
_SAME_KEYS: Mapping[str, str] = {}


def fields_to_json(record: Any, keys: Mapping[str, str] = _SAME_KEYS) -> dict[str, Any]:
    """`record`'s fields as a JSON object, in field order; `keys` renames some of them."""
    return {
        keys.get(field.name, field.name): getattr(record, field.name)
        for field in dataclasses.fields(record)
    }


def fields_from_json(
    cls: type[T], data: Mapping[str, Any], keys: Mapping[str, str] = _SAME_KEYS
) -> T:
    """The instance of `cls` that `fields_to_json` wrote as `data`; each value is converted to
    its field's type (`int("5")`), so a field of a type that cannot convert a value has no place
    here."""
    values = {
        name: convert(data[keys.get(name, name)]) for name, convert in _converters(cls).items()
    }
    return cls(**values)


class JsonFields:
    """Gives a flat dataclass `to_json` and `from_json` (the functions above); a class renames
    keys in `JSON_KEYS`."""

    JSON_KEYS: ClassVar[Mapping[str, str]] = _SAME_KEYS

    def to_json(self) -> dict[str, Any]:
        return fields_to_json(self, self.JSON_KEYS)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Self:
        return fields_from_json(cls, data, cls.JSON_KEYS)


def _converters(cls: type[Any]) -> dict[str, Callable[[Any], Any]]:
    # Resolved once per class: with `from __future__ import annotations` the hints are strings.
    found = _CONVERTERS.get(cls)
    if found is None:
        hints = typing.get_type_hints(cls)
        found = {field.name: hints[field.name] for field in dataclasses.fields(cls) if field.init}
        _CONVERTERS[cls] = found
    return found


_CONVERTERS: dict[type[Any], dict[str, Callable[[Any], Any]]] = {}
