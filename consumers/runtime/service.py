"""Running one service as a process: signals, the metrics endpoint, exit codes."""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Awaitable, Callable

from prometheus_client import CollectorRegistry, start_http_server

from gpufailover.settings import DEFAULT_METRICS_HOST

log = logging.getLogger(__name__)

ServiceMain = Callable[[asyncio.Event, CollectorRegistry], Awaitable[None]]


def run_standalone(
    name: str, main: ServiceMain, metrics_port: int, metrics_host: str = DEFAULT_METRICS_HOST
) -> int:
    """Run `main` until SIGINT/SIGTERM; serve its registry on `metrics_host:metrics_port`
    unless the port is 0."""

    async def _run() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        registry = CollectorRegistry()
        if metrics_port:
            start_http_server(metrics_port, addr=metrics_host, registry=registry)
            log.info("%s: metrics on %s:%d/metrics", name, metrics_host, metrics_port)
        await main(stop, registry)

    asyncio.run(_run())
    log.info("%s: stopped", name)
    return 0
