"""Loopback ports for the local servers that tests and the demo start."""

from __future__ import annotations

import random
import socket
from pathlib import Path

# Below the kernel's ephemeral range nothing is handed out implicitly: a client's outgoing
# connection can never take the port between our probe and the server's bind, nor while a test
# has a broker stopped for a restart on the same port.
_LOWEST_PORT = 10_000
_EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
_DEFAULT_EPHEMERAL_LOW = 32_768
_TRIES = 200


def free_port() -> int:
    """A loopback TCP port, outside the ephemeral range, that was free a moment ago.

    The caller's server binds it soon after. Another process choosing the same port in that
    window is an accepted race: it shows up as the server's own start-up error naming the
    address in use, never as a silent wrong port.
    """
    highest = ephemeral_low() - 1
    draw = random.SystemRandom()
    if highest > _LOWEST_PORT:
        for _ in range(_TRIES):
            port = draw.randint(_LOWEST_PORT, highest)
            if _bindable(port):
                return port
    return _kernel_chosen_port()  # no room below the ephemeral range on this machine


def ephemeral_low() -> int:
    """The first port of the kernel's ephemeral range (Linux), or the usual default."""
    try:
        return int(_EPHEMERAL_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return _DEFAULT_EPHEMERAL_LOW


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def _kernel_chosen_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])
