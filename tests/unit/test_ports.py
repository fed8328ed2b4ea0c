"""Ports for local servers come from below the ephemeral range and are free when handed out."""

from __future__ import annotations

import socket

import pytest

from service.dev import ports
from service.dev.ports import ephemeral_low, free_port


def test_ports_are_below_the_ephemeral_range_and_bindable() -> None:
    low = ephemeral_low()
    for _ in range(50):
        port = free_port()
        assert 10_000 <= port < low
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as server:
            server.bind(("127.0.0.1", port))


def test_a_port_in_use_is_passed_over(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as server:
        server.bind(("127.0.0.1", free_port()))
        server.listen()
        taken = server.getsockname()[1]
        spare = free_port()
        draws = iter([taken, taken, spare])

        class _Draws:
            def randint(self, low: int, high: int) -> int:
                return next(draws)

        monkeypatch.setattr(ports.random, "SystemRandom", _Draws)

        assert free_port() == spare
