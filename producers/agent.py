"""The GPU node agent: sources in threads -> flood de-dup -> bounded buffer -> idempotent producer.

Sources (`NvmlSource`, `KernelLogSource`) run in daemon threads and hand records to the event
loop; XIDs pass the de-duplication, health changes go straight out; all records are keyed by
node and go into the spool (on disk) before the broker sees them. A source that dies stops the
agent with a non-zero exit (no agent that looks alive while it reads nothing).

The /dev/kmsg source hands over `KernelRead`s (a kernel sequence number and what the record
gave); the agent stores the cursor with the records it produced (`CursorTracker`), with each
record, else at most once a tick, and at shutdown.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from gpufailover.metric_labels import xid_label
from producers.dedup import FloodDeduper, gpu_key
from producers.heartbeat import Heartbeat
from producers.kmsg_resume import CursorTracker, KernelRead
from producers.metrics import AgentMetrics
from producers.publisher import BufferedPublisher
from producers.spool import Outgoing
from schemas.codec import dumps
from schemas.health import GpuHealth
from schemas.topics import Topic, TopicNames
from schemas.xid import GpuXid

log = logging.getLogger(__name__)

Record = GpuXid | GpuHealth
Sink = Callable[[Record | KernelRead], None]


class Source(Protocol):
    name: str

    def run(self, sink: Sink) -> None:
        """Block, calling `sink` for every record, until `close`; raise if the source fails."""

    def close(self) -> None:
        """Make `run` return soon (thread-safe)."""


class Agent:
    def __init__(
        self,
        topics: TopicNames,
        publisher: BufferedPublisher,
        metrics: AgentMetrics,
        *,
        dedup_window_s: float = 60.0,
        drain_timeout_s: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
        cursor: CursorTracker | None = None,
        heartbeat: Heartbeat | None = None,
    ) -> None:
        self.topics = topics
        self.publisher = publisher
        self.metrics = metrics
        self.deduper = FloodDeduper(dedup_window_s)
        self.drain_timeout_s = drain_timeout_s
        self.clock = clock
        self.cursor = cursor
        self.heartbeat = heartbeat  # on gpu.health every interval (docs/silent-nodes.md)
        self._stop = asyncio.Event()

    def stop(self) -> None:
        self._stop.set()

    # -- on the event loop ----------------------------------------------------------------
    def emit(self, item: Record | KernelRead) -> None:
        if isinstance(item, KernelRead):
            self._kernel_read(item)
        else:
            self._publish(self._through_dedup(item))

    def _through_dedup(self, rec: Record) -> list[Record]:
        if isinstance(rec, GpuHealth):
            self.metrics.health_conditions.labels(condition=rec.condition).inc()
            return [rec]
        self.metrics.xids.labels(code=xid_label(rec.xid)).inc(rec.count)
        before = self.deduper.suppressed
        out: list[Record] = list(self.deduper.offer(rec, self.clock()))
        self.metrics.suppressed.inc(self.deduper.suppressed - before)
        return out

    def _kernel_read(self, read: KernelRead) -> None:
        out = [] if read.record is None else self._through_dedup(read.record)
        if self.cursor is not None:
            if isinstance(read.record, GpuXid):
                key = gpu_key(read.record)
                if out:  # a new window: any earlier folds of this key went out with it
                    self.cursor.released([key])
                else:
                    self.cursor.folded(key)
            self.cursor.advance(read.seq)
        if out:  # lines without records move the cursor at the next tick
            self._publish(out)

    def _publish(self, records: Sequence[Record]) -> None:
        items = [self._outgoing(rec) for rec in records]
        cursor = self.cursor.pending() if self.cursor is not None else None
        if not items and cursor is None:
            return
        if self.publisher.accept(items, cursor) and cursor is not None:
            assert self.cursor is not None
            self.cursor.saved(cursor)

    def _outgoing(self, rec: Record) -> Outgoing:
        logical = Topic.GPU_XID if isinstance(rec, GpuXid) else Topic.GPU_HEALTH
        return Outgoing(logical, self.topics.name(logical), rec.node.encode(), dumps(rec.to_dict()))

    def flush_due(self) -> None:
        summaries = self.deduper.due(self.clock())
        if self.cursor is not None:
            self.cursor.released([gpu_key(x) for x in summaries])
        self._publish(summaries)

    async def _tick(self) -> None:
        every = [1.0, self.deduper.window_s / 4]
        if self.heartbeat is not None:
            every.append(self.heartbeat.interval_s / 4)
        period = max(0.05, min(every))
        while True:
            await asyncio.sleep(period)
            self.flush_due()
            beat = self.heartbeat.due() if self.heartbeat is not None else None
            if beat is not None:
                self.emit(beat)
            self.metrics.heartbeat.set_to_current_time()

    # -- lifecycle ------------------------------------------------------------------------
    async def run(self, sources: list[Source]) -> int:
        """Run until `stop()` or a source fails; drain; return the exit status."""
        loop = asyncio.get_running_loop()

        def sink(rec: Record | KernelRead) -> None:
            with contextlib.suppress(RuntimeError):  # the loop is closing
                loop.call_soon_threadsafe(self.emit, rec)

        pub_task = asyncio.create_task(self.publisher.run(), name="publisher")
        tick_task = asyncio.create_task(self._tick(), name="dedup-tick")
        stop_task = asyncio.create_task(self._stop.wait(), name="stop")
        source_futs = {_in_thread(loop, s, sink): s for s in sources}
        status = 0
        try:
            waitables: set[asyncio.Future[Any]] = {stop_task, pub_task, *source_futs}
            done, _ = await asyncio.wait(waitables, return_when=asyncio.FIRST_COMPLETED)
            for fut in done:
                if fut in source_futs:
                    status = 1
                    exc = fut.exception()
                    name = source_futs[fut].name
                    if exc is not None:
                        log.error("source %s failed: %s", name, exc, exc_info=exc)
                    else:
                        log.error("source %s stopped unexpectedly", name)
            if pub_task in done:
                status = 1
                log.error("publisher stopped: %r", pub_task.exception())
        finally:
            await self._shutdown(sources, source_futs, pub_task, tick_task, stop_task)
        return status

    async def _shutdown(
        self,
        sources: list[Source],
        source_futs: dict[asyncio.Future[None], Source],
        pub_task: asyncio.Task[None],
        tick_task: asyncio.Task[None],
        stop_task: asyncio.Task[bool],
    ) -> None:
        for s in sources:
            s.close()
        if source_futs:
            await asyncio.wait(source_futs, timeout=10.0)
        # (a source's last records were handed over before its future settled: emitted by now)
        summaries = self.deduper.drain()
        if self.cursor is not None:
            self.cursor.release_all()
        self._publish(summaries)
        tick_task.cancel()
        stop_task.cancel()
        self.publisher.close()
        spool = self.publisher.spool
        if not pub_task.done() and spool.durable and not self.publisher.connected.is_set():
            pub_task.cancel()  # no broker to drain to: what is spooled waits on disk
        if not pub_task.done():
            await asyncio.wait({pub_task}, timeout=self.drain_timeout_s)
        if not pub_task.done():
            pub_task.cancel()
        if len(spool) and spool.durable:
            log.warning("stopping with %d events not delivered: kept in %s for the next start",
                        len(spool), spool.where)  # fmt: skip
        elif len(spool):
            log.error("stopping with %d events not delivered (broker unreachable, no spool "
                      "on disk): lost", len(spool))  # fmt: skip
        await asyncio.gather(pub_task, tick_task, stop_task, return_exceptions=True)


def _in_thread(loop: asyncio.AbstractEventLoop, source: Source, sink: Sink) -> asyncio.Future[None]:
    """Run `source.run(sink)` in a daemon thread; the future completes when it returns."""
    fut: asyncio.Future[None] = loop.create_future()

    def settle(exc: BaseException | None) -> None:
        if fut.done():
            return
        if exc is None:
            fut.set_result(None)
        else:
            fut.set_exception(exc)

    def target() -> None:
        error: BaseException | None = None
        try:
            source.run(sink)
        except BaseException as exc:  # noqa: BLE001 - handed to the loop, which reports it
            error = exc
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(settle, error)

    threading.Thread(target=target, name=f"source-{source.name}", daemon=True).start()
    return fut
