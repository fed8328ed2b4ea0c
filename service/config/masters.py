"""Spark master URLs as values: which kind of cluster, and where its master is.

The driver picks its own address from the master (loopback for local mode, the route towards the
master otherwise), and the shared-storage rules ask whether every executor runs on this host.

>>> parse_master("local[2]").is_local
True
>>> master = parse_master("spark://10.0.0.5:7077,10.0.0.6:7077")
>>> master.kind, master.endpoints[0]
('standalone', ('10.0.0.5', 7077))
>>> parse_master("k8s://https://kubernetes.default.svc").endpoints
(('kubernetes.default.svc', 443),)
>>> parse_master("spark://127.0.0.1:7077").on_this_host
True
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from typing import Literal
from urllib.parse import urlsplit

MasterKind = Literal["local", "standalone", "kubernetes", "yarn"]

_LOCAL = re.compile(r"local(\[(\d+|\*)(,\d+)?\])?")
_HOST_PORT = re.compile(r"(?P<host>\[[0-9a-fA-F:.]+\]|[^:/\s,\[\]]+)(:(?P<port>\d{1,5}))?")
_EXPECTED = (
    "expected local, local[N], local[N,F], local[*], spark://host:port[,host:port...], "
    "k8s://https://host[:port] or yarn"
)
_STANDALONE_PORT = 7077


@dataclass(frozen=True)
class SparkMaster:
    """A parsed `spark.master`: its kind and the (host, port) endpoints of its master(s)."""

    url: str
    kind: MasterKind
    endpoints: tuple[tuple[str, int], ...] = ()

    @property
    def is_local(self) -> bool:
        """Local mode: every task runs inside the driver's own JVM."""
        return self.kind == "local"

    @property
    def on_this_host(self) -> bool:
        """True when every executor certainly runs on this machine: local mode, or a standalone
        master on loopback (whose workers must then be on loopback too)."""
        if self.is_local:
            return True
        return self.kind == "standalone" and all(_is_loopback(h) for h, _ in self.endpoints)


def parse_master(url: str) -> SparkMaster:
    """The `SparkMaster` of `url`; `ValueError` naming the accepted forms otherwise."""
    text = url.strip()
    if _LOCAL.fullmatch(text):
        return SparkMaster(text, "local")
    if text == "yarn":
        return SparkMaster(text, "yarn")
    if text.startswith("spark://"):
        return SparkMaster(text, "standalone", _standalone_endpoints(text))
    if text.startswith("k8s://"):
        return SparkMaster(text, "kubernetes", (_kubernetes_endpoint(text),))
    msg = f"{url!r} is not a Spark master URL; {_EXPECTED}"
    raise ValueError(msg)


def _standalone_endpoints(url: str) -> tuple[tuple[str, int], ...]:
    endpoints = []
    for part in url.removeprefix("spark://").split(","):
        match = _HOST_PORT.fullmatch(part.strip())
        if match is None:
            msg = f"{url!r}: {part!r} is not host:port; {_EXPECTED}"
            raise ValueError(msg)
        port = int(match["port"] or _STANDALONE_PORT)
        endpoints.append((match["host"].strip("[]"), port))
    return tuple(endpoints)


def _kubernetes_endpoint(url: str) -> tuple[str, int]:
    # Spark reads k8s://host:port as https://host:port, and k8s://http://... as given.
    rest = url.removeprefix("k8s://")
    split = urlsplit(rest if "://" in rest else f"https://{rest}")
    if not split.hostname:
        msg = f"{url!r} names no API server host; {_EXPECTED}"
        raise ValueError(msg)
    try:
        port = split.port or (80 if split.scheme == "http" else 443)
    except ValueError:
        msg = f"{url!r} has an invalid port; {_EXPECTED}"
        raise ValueError(msg) from None
    return split.hostname, port


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
