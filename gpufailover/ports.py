"""A free TCP port on this host, for the processes the demo, the benchmarks and the chaos
harness start (metrics and web servers of several services on one machine)."""

from __future__ import annotations

import socket


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def free_ports(n: int) -> list[int]:
    """`n` distinct free ports (all held open while choosing, so none is picked twice)."""
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()
