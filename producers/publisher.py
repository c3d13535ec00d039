"""The spool in front of an idempotent producer: accept now, send in order, forget on ack.

Records are accepted with `accept` (never blocks on the broker, never raises): they are in the
spool (`producers/spool.py`, on disk by default) before it returns. `run` sends the spool's
head in batches, in spool order, and removes exactly the records the broker acknowledged; a
record leaves the spool only then. While the broker is unreachable the spool fills up to its
caps (oldest evicted first, counted).

Delivery is at-least-once across restarts, exactly once within one producer session (the
idempotent producer de-duplicates its own retries). What can be sent twice: a batch the broker
acknowledged when the agent died before removing it (SIGKILL in that millisecond), or whose
acknowledgement was lost and which is resent by a new producer after a reconnect. The pipeline
tolerates it: the classifier coalesces identical XIDs into one evidence item (the count grows,
never the verdict) and a repeated health condition does not change a node's state.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sqlite3
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from producers.metrics import AgentMetrics
from producers.spool import Cursor, Outgoing, Spool, Spooled
from schemas.codec import dumps

__all__ = ["BufferedPublisher", "Outgoing", "Producer"]

log = logging.getLogger(__name__)

BATCH = 500  # records in flight at once: a drain after an outage is pipelined, not 1 by 1


class Producer(Protocol):
    async def start(self) -> None: ...
    async def stop(self) -> None: ...
    async def send(
        self, topic: str, value: bytes, key: bytes | None = None
    ) -> asyncio.Future[Any]: ...


class BufferedPublisher:
    """Owns the producer: connects with backoff, drains the spool, retries failed sends."""

    def __init__(
        self,
        producer_factory: Callable[[], Producer],
        spool: Spool,
        metrics: AgentMetrics,
        *,
        backoff_s: tuple[float, float] = (0.5, 30.0),
        batch: int = BATCH,
    ) -> None:
        self.producer_factory = producer_factory
        self.spool = spool
        self.metrics = metrics
        self.backoff_min, self.backoff_max = backoff_s
        self.batch = batch
        self._wake = asyncio.Event()
        self._closing = False
        self.connected = asyncio.Event()
        self.published = 0
        self._backlog = 0  # events waiting when the connection came (for the "drained" log)

    def submit(self, logical_topic: str, topic: str, key: str, value: dict[str, Any]) -> None:
        self.accept([Outgoing(logical_topic, topic, key.encode(), dumps(value))])

    def accept(self, items: Sequence[Outgoing], cursor: Cursor | None = None) -> bool:
        """Spool `items` and move `cursor` together; False (logged, counted) if the spool
        cannot be written (disk full, I/O error)."""
        try:
            self.spool.append(items, cursor)
        except sqlite3.Error as exc:
            log.error("cannot write to spool %s (%s): %d events dropped",  # noqa: TRY400 - no trace
                      self.spool.where, exc, len(items))  # fmt: skip
            self.metrics.dropped.inc(len(items))
            return False
        if items:
            if not self.connected.is_set():
                log.info(
                    "broker not connected: %s spooled, %d events waiting in %s",
                    ", ".join(sorted({i.logical_topic for i in items})),
                    len(self.spool),
                    self.spool.where,
                )
            self._wake.set()
        return True

    async def run(self) -> None:
        """Send until `close`, then drain what is left (a durable spool is not drained while
        the broker is unreachable: it waits on disk for the next start); cancel to stop."""
        producer: Producer | None = None
        backoff = self.backoff_min
        try:
            while True:
                if self._closing and self._may_stop(producer):
                    return
                if producer is None:
                    producer = await self._connect()
                    if producer is None:
                        await self._pause(backoff)
                        backoff = min(backoff * 2, self.backoff_max)
                        continue
                    backoff = self.backoff_min
                batch = self.spool.head(self.batch)
                if not batch:
                    self._wake.clear()
                    if not self._closing:
                        await self._wake.wait()
                    continue
                if await self._send(producer, batch):
                    backoff = self.backoff_min
                    continue
                self.connected.clear()
                with contextlib.suppress(Exception):  # the old client is being dropped anyway
                    await producer.stop()
                producer = None
                await self._pause(backoff)
                backoff = min(backoff * 2, self.backoff_max)
        finally:
            self.connected.clear()
            if producer is not None:
                await producer.stop()

    def _may_stop(self, producer: Producer | None) -> bool:
        return not len(self.spool) or (self.spool.durable and producer is None)

    async def _send(self, producer: Producer, batch: list[Spooled]) -> bool:
        """Send `batch` pipelined; remove what was acknowledged; False on any failure."""
        from aiokafka.errors import KafkaError

        sent: list[tuple[Spooled, asyncio.Future[Any]]] = []
        error: BaseException | None = None
        for s in batch:
            try:
                fut = await producer.send(s.item.topic, s.item.value, key=s.item.key)
            except KafkaError as exc:
                error = exc
                break
            sent.append((s, fut))
        results = await asyncio.gather(*(f for _, f in sent), return_exceptions=True)
        acked = []
        for (s, _), result in zip(sent, results, strict=True):
            if isinstance(result, BaseException):
                error = error or result
            else:
                acked.append(s)
        self.spool.remove([s.id for s in acked])
        self.published += len(acked)
        for topic, n in Counter(s.item.logical_topic for s in acked).items():
            self.metrics.published.labels(topic=topic).inc(n)
        if error is not None:
            if not isinstance(error, KafkaError):
                raise error
            log.warning("send to %s failed, reconnecting (%d events kept in the spool): %r",
                        batch[0].item.topic, len(self.spool), error)  # fmt: skip
            return False
        if self._backlog and not len(self.spool):
            log.info("spool drained: the %d events kept while disconnected are delivered",
                     self._backlog)  # fmt: skip
            self._backlog = 0
        return True

    async def _connect(self) -> Producer | None:
        from aiokafka.errors import KafkaError

        producer = self.producer_factory()
        try:
            await producer.start()
        except (KafkaError, OSError) as exc:
            log.warning("broker unreachable (%r); spooling: %d events waiting in %s",
                        exc, len(self.spool), self.spool.where)  # fmt: skip
            with contextlib.suppress(KafkaError, OSError):
                await producer.stop()
            return None
        except BaseException:  # cancelled (drain time is up): release the half-started client
            with contextlib.suppress(KafkaError, OSError):
                await producer.stop()
            raise
        log.info("connected to the broker (%d events waiting in the spool)", len(self.spool))
        self._backlog = len(self.spool)
        self.connected.set()
        return producer

    async def _pause(self, seconds: float) -> None:
        """Back off before retrying; cut short when closing makes waiting pointless."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + seconds
        while not (self._closing and self._may_stop(None)):
            remaining = deadline - loop.time()
            if remaining <= 0:
                return
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(remaining):
                    await self._wake.wait()

    def close(self) -> None:
        """Stop taking new work: `run` returns once the spool is drained (or, on disk, at
        once while the broker is unreachable)."""
        self._closing = True
        self._wake.set()
