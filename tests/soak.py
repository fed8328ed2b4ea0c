"""Two sizes for the long fault runs: a cut for `make test`, the full run for `make soak`.

`make test` must finish within CI's time on two cores, so each long fault run there is cut to the
size that still reaches every crash point or fault it names; `make soak` sets `DSTREAMS_SOAK=1`
and runs them at full size, plus the runs that only make sense long (an outage past a timeout, a
run that is timing-sensitive on a loaded machine).
"""

from __future__ import annotations

import os

import pytest

SOAK = os.environ.get("DSTREAMS_SOAK") == "1"


def sized(in_test: int, in_soak: int) -> int:
    """The size of a run: `in_soak` under `make soak`, `in_test` otherwise."""
    return in_soak if SOAK else in_test


def soak_only(why: str) -> pytest.MarkDecorator:
    """Skips a test outside `make soak`, saying why it is long."""
    return pytest.mark.skipif(not SOAK, reason=f"{why}: `make soak` runs it (DSTREAMS_SOAK=1)")
