"""Images are cached by content: once built, asking for the same content again builds nothing."""

from __future__ import annotations

from typing import Any

from service.dev.docker_engine import docker_client
from service.dev.images import ImageBuilder


def test_a_second_request_for_the_same_content_builds_nothing(
    docker_engine: Any, kafka_on_docker: Any, dstreams_image: str
) -> None:
    client = docker_client(docker_engine.docker_host)
    steps: list[str] = []
    try:
        builder = ImageBuilder.for_engine(client, docker_engine, steps.append)
        assert builder.kafka_image() == kafka_on_docker.image
        assert builder.dstreams_image() == dstreams_image
        ids = {client.images.get(dstreams_image).id, client.images.get("dstreams:0.1.0").id}
    finally:
        client.close()
    assert steps, "the builder reports each image it looks at"
    assert all(step.endswith(": cached") for step in steps), steps
    assert len(ids) == 1, "dstreams:0.1.0 names the content-tagged image"
