"""Loopback addresses and free ports, for the workers and servers effctx starts or attaches to."""

from __future__ import annotations

import ipaddress
import socket


def is_loopback(host: str) -> bool:
    """Only an address literal or `localhost` counts: a name that resolves to loopback
    today may not tomorrow, and resolving it has no time bound."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def free_port() -> int:
    """A loopback port nothing listens on now, for a worker or a server to take."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port
