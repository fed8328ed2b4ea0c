"""Fixtures of the container tier; the engine and the Kafka container are in tests/conftest.py."""

from __future__ import annotations

from typing import Any

import pytest

from service.dev.docker_engine import docker_client
from service.dev.images import ImageBuilder


@pytest.fixture(scope="session")
def dstreams_image(docker_engine: Any) -> str:
    """The project's image in the session's engine, built when its content changed."""
    client = docker_client(docker_engine.docker_host)
    try:
        return str(ImageBuilder.for_engine(client, docker_engine, print).dstreams_image())
    finally:
        client.close()
