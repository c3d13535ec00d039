"""What the classifier worker runs beside its agents: the rebalance hook, the clock ticks, the
signal filter's task, the early commit and the /metrics page. `streams.app` declares them to
faust."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder

from schemas.engine import Tick
from streams.filter_process import FilterProcess
from streams.glue import NodeGlue
from streams.job_glue import JobGlue
from streams.signal_loop import SignalLoop

log = logging.getLogger("gpufailover.classifier")

RevokedHook = Callable[..., Awaitable[None]]
TICK = orjson.dumps(Tick().to_dict())  # failover.ticks: the same empty record every time


def forget_revoked(*glues: NodeGlue | JobGlue) -> RevokedHook:
    """faust's `on_partitions_revoked` receiver: the glues cache each partition's clock, and a
    partition that comes back may have been moved on by another worker meanwhile: reload it
    from the (recovered) table."""

    async def on_revoked(sender: Any, *args: Any, signal: Any, **kwargs: Any) -> None:
        revoked: set[Any] = args[0] if args else kwargs.get("revoked", set())
        partitions = {tp.partition for tp in revoked}
        for glue in glues:
            glue.forget(partitions)

    return on_revoked


async def send_ticks(ticks: Any, partitions: int) -> None:
    """A tick on every partition lets quiet partitions close their windows (idle advance)."""
    for partition in range(partitions):
        await ticks.send(key=None, value=TICK, partition=partition)


async def run_signal_filter(
    signal_loop: SignalLoop | FilterProcess, crash: Callable[[BaseException], Awaitable[None]]
) -> None:
    """Run the filter; if it fails the worker must stop (`crash`, like a crashed agent): a
    live worker whose filter died would decide nothing on node evidence."""
    try:
        await signal_loop.run()
    except asyncio.CancelledError:
        raise
    except BaseException as exc:
        log.exception("signal filter failed: stopping the worker")
        await crash(exc)


class CommitSoon:
    """A commit of faust's consumer now, in the background, at most one at a time.

    Asked for when a node-signals partition's held evidence is all applied: its committed
    offset stayed at the first held record through the flood (`streams.deferred`) and would
    otherwise move only at faust's next periodic commit (every 2.8 s), leaving that much
    more to re-read after a crash and the lag on the dashboards high after the work is done.
    """

    def __init__(self, commit: Callable[[], Awaitable[Any]]) -> None:
        self._commit = commit
        self._running: asyncio.Task[None] | None = None
        self._again = False

    def request(self) -> None:
        if self._running is not None and not self._running.done():
            self._again = True  # the one running may have read the offsets before this
            return
        self._running = asyncio.ensure_future(self._run())

    async def _run(self) -> None:
        while True:
            self._again = False
            try:
                await self._commit()
            except Exception as exc:  # noqa: BLE001 - the periodic commit retries it
                log.warning("early commit failed (%r): the periodic commit will retry", exc)
            if not self._again:
                return


def metrics_response(view: Any, request: Any, registry: CollectorRegistry) -> Any:
    """prometheus-client's exposition of `registry` on the worker's web server, in the format
    the scraper asks for (OpenMetrics or text), as its own HTTP server does."""
    encode, content_type = choose_encoder(request.headers.get("Accept"))
    return view.bytes(encode(registry), headers={"Content-Type": content_type})
