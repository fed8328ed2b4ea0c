"""Loopback ports for the local servers that tests and the demo start."""

from __future__ import annotations

import socket


def free_port() -> int:
    """A loopback TCP port that was free a moment ago; the caller's server binds it soon after.

    The window between this probe and the server's bind is an accepted race: a clash shows up as
    the server's own start-up error naming the address in use, never as a silent wrong port.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])
