"""The base of every configuration model: frozen, strict about unknown keys, documented."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class ConfigModel(BaseModel):
    # Frozen: settings are read by many threads and must not change under them. Unknown keys
    # are errors so a typo is never silently ignored.
    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)
