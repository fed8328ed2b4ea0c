"""Fixtures of the contract suites: one parametrised backend fixture per contract.

Each case of `SINK_BACKENDS` and `JOURNAL_BACKENDS` carries its own tier mark (the tier
assignment in tests/conftest.py demands exactly one per contract case), and a backend asks for
its server (`kafka_bootstrap`, `postgres_dsn`) only when it starts, so `-m unit` starts none.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.contracts.journal_backends import JOURNAL_BACKENDS, JournalBackend
from tests.contracts.sink_backends import SINK_BACKENDS, SinkBackend

_SHIPPED_SINK_BACKENDS = [case for case in SINK_BACKENDS if not case.values[0].in_process]


@pytest.fixture(params=SINK_BACKENDS)
def sink_backend(
    request: pytest.FixtureRequest, unique_name: str, tmp_path: Path
) -> Iterator[SinkBackend]:
    """Every sink backend in turn."""
    backend: SinkBackend = request.param.start(request, unique_name, tmp_path)
    yield backend
    backend.stop()


@pytest.fixture(params=_SHIPPED_SINK_BACKENDS)
def shipped_sink_backend(
    request: pytest.FixtureRequest, unique_name: str, tmp_path: Path
) -> Iterator[SinkBackend]:
    """The backends whose sinks are shipped to executor processes: what they commit outlives
    the writing process, so a write may die half-way and copies of a task race as processes."""
    backend: SinkBackend = request.param.start(request, unique_name, tmp_path)
    yield backend
    backend.stop()


@pytest.fixture(params=JOURNAL_BACKENDS)
def journal_backend(
    request: pytest.FixtureRequest, unique_name: str, tmp_path: Path
) -> Iterator[JournalBackend]:
    """Every journal backend in turn; each journal it made is closed afterwards."""
    backend: JournalBackend = request.param.start(request, unique_name, tmp_path)
    yield backend
    backend.close_all()
