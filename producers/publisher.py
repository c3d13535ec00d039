"""A bounded in-memory buffer in front of an idempotent producer.

Records are queued with `submit` (never blocks, never raises) and sent in order by `run`;
a record leaves the buffer only once the broker acknowledged it. While the broker is
unreachable the buffer fills; when full, the *oldest* record is dropped and counted (the
freshest state of a node is what the pipeline needs when it comes back). Delivery is
at-least-once: a record whose acknowledgement was lost is sent again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from producers.metrics import AgentMetrics
from schemas.codec import dumps

log = logging.getLogger(__name__)


class Producer(Protocol):
    async def start(self) -> None: ...
    async def stop(self) -> None: ...
    async def send_and_wait(self, topic: str, value: bytes, key: bytes | None = None) -> Any: ...


@dataclass(frozen=True, slots=True)
class Outgoing:
    logical_topic: str
    topic: str
    key: bytes
    value: bytes


class EventBuffer:
    """A FIFO of at most `capacity` records that drops the oldest when full."""

    def __init__(self, capacity: int, metrics: AgentMetrics) -> None:
        if capacity < 1:
            raise ValueError(f"buffer capacity must be >= 1, got {capacity}")
        self.capacity = capacity
        self.metrics = metrics
        self._items: deque[Outgoing] = deque()
        self.dropped = 0

    def put(self, item: Outgoing) -> None:
        if len(self._items) >= self.capacity:
            self._items.popleft()
            self.dropped += 1
            self.metrics.dropped.inc()
        self._items.append(item)
        self.metrics.buffer_depth.set(len(self._items))

    def peek(self) -> Outgoing | None:
        return self._items[0] if self._items else None

    def remove(self, item: Outgoing) -> None:
        """Remove `item` if it is still the head (it may have been dropped meanwhile)."""
        if self._items and self._items[0] is item:
            self._items.popleft()
        self.metrics.buffer_depth.set(len(self._items))

    def __len__(self) -> int:
        return len(self._items)


class BufferedPublisher:
    """Owns the producer: connects with backoff, drains the buffer, retries failed sends."""

    def __init__(
        self,
        producer_factory: Callable[[], Producer],
        buffer: EventBuffer,
        metrics: AgentMetrics,
        *,
        backoff_s: tuple[float, float] = (0.5, 30.0),
    ) -> None:
        self.producer_factory = producer_factory
        self.buffer = buffer
        self.metrics = metrics
        self.backoff_min, self.backoff_max = backoff_s
        self._wake = asyncio.Event()
        self._closing = False
        self.connected = asyncio.Event()
        self.published = 0

    def submit(self, logical_topic: str, topic: str, key: str, value: dict[str, Any]) -> None:
        self.buffer.put(Outgoing(logical_topic, topic, key.encode(), dumps(value)))
        self._wake.set()

    async def run(self) -> None:
        """Send until `close` (then drain what is left); cancel to stop at once."""
        from aiokafka.errors import KafkaError

        producer: Producer | None = None
        backoff = self.backoff_min
        try:
            while True:
                if self._closing and not len(self.buffer):
                    return
                if producer is None:
                    producer = await self._connect()
                    if producer is None:
                        await self._pause(backoff)
                        backoff = min(backoff * 2, self.backoff_max)
                        continue
                    backoff = self.backoff_min
                item = self.buffer.peek()
                if item is None:
                    self._wake.clear()
                    if not self._closing:
                        await self._wake.wait()
                    continue
                try:
                    await producer.send_and_wait(item.topic, item.value, key=item.key)
                except KafkaError as exc:
                    log.warning("send to %s failed, reconnecting: %r", item.topic, exc)
                    self.connected.clear()
                    with contextlib.suppress(KafkaError, OSError):
                        await producer.stop()
                    producer = None
                    await self._pause(backoff)
                    backoff = min(backoff * 2, self.backoff_max)
                    continue
                backoff = self.backoff_min
                self.buffer.remove(item)
                self.published += 1
                self.metrics.published.labels(topic=item.logical_topic).inc()
        finally:
            self.connected.clear()
            if producer is not None:
                await producer.stop()

    async def _connect(self) -> Producer | None:
        from aiokafka.errors import KafkaError

        producer = self.producer_factory()
        try:
            await producer.start()
        except (KafkaError, OSError) as exc:
            log.warning("broker unreachable (%r); buffering (%d queued)", exc, len(self.buffer))
            with contextlib.suppress(KafkaError, OSError):
                await producer.stop()
            return None
        except BaseException:  # cancelled (drain time is up): release the half-started client
            with contextlib.suppress(KafkaError, OSError):
                await producer.stop()
            raise
        log.info("connected to the broker")
        self.connected.set()
        return producer

    async def _pause(self, seconds: float) -> None:
        """Back off before retrying; cut short only when closing with nothing left to send
        (the owner cancels `run` when its drain time is up)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + seconds
        while not (self._closing and not len(self.buffer)):
            remaining = deadline - loop.time()
            if remaining <= 0:
                return
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(remaining):
                    await self._wake.wait()

    def close(self) -> None:
        """Stop taking new work: `run` returns once the buffer is drained."""
        self._closing = True
        self._wake.set()
