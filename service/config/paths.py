"""Where the files shipped in `config/` are: next to the source tree, or where the image put them.

A source checkout (or an editable install) has `config/` beside the packages. An installed wheel
does not; the container image copies `config/` to `/app/config` and names it with
`DSTREAMS_CONFIG_DIR`. Without either, `config/` under the working directory is tried.
"""

from __future__ import annotations

import os
from pathlib import Path

CONFIG_DIR_VARIABLE = "DSTREAMS_CONFIG_DIR"
_SOURCE_TREE_CONFIG = Path(__file__).resolve().parents[2] / "config"


def config_dir() -> Path:
    named = os.environ.get(CONFIG_DIR_VARIABLE)
    if named:
        return Path(named)
    if _SOURCE_TREE_CONFIG.is_dir():
        return _SOURCE_TREE_CONFIG
    return Path.cwd() / "config"


def shipped_config_file(name: str) -> Path:
    """`config/<name>` as shipped with dstreams (it may not exist; callers check)."""
    return config_dir() / name
