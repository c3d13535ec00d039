"""Follow whole topics from their beginning: how a service rebuilds and keeps its state.

A tail is a group-less consumer assigned every partition of its topics, reading from the
beginning and then following. `sync()` waits until it has applied everything that was in the
topics when `sync()` was called: a service calls it at startup (state rebuilt before the first
input record) and when partitions are assigned to it (state current before it takes over).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Sequence
from types import TracebackType
from typing import Any

from consumers.runtime.oneshot import partitions_of
from consumers.runtime.records import InRecord
from gpufailover.kafka import make_consumer
from gpufailover.security import PLAINTEXT, KafkaSecurity
from schemas.errors import SchemaError

log = logging.getLogger(__name__)

Apply = Callable[[InRecord], None]
OnError = Callable[[InRecord, Exception], None]


class TopicTail:
    def __init__(
        self,
        bootstrap: str,
        topics: Sequence[str],
        apply: Apply,
        *,
        name: str,
        on_error: OnError | None = None,
        poll_ms: int = 200,
        security: KafkaSecurity = PLAINTEXT,
    ) -> None:
        self._bootstrap = bootstrap
        self._security = security
        self._topics = tuple(topics)
        self._apply = apply
        self._name = name
        self._on_error = on_error
        self._poll_ms = poll_ms
        self._consumer: Any = None
        self._task: asyncio.Task[None] | None = None
        self._tps: list[Any] = []
        self._positions: dict[Any, int] = {}
        self._progress = asyncio.Condition()
        self.caught_up_once = False

    async def __aenter__(self) -> TopicTail:
        await self.start()
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def start(self) -> None:
        from aiokafka import TopicPartition

        found = await partitions_of(self._bootstrap, self._topics, security=self._security)
        self._tps = [TopicPartition(t, p) for t in self._topics for p in found[t]]
        self._consumer = make_consumer(
            self._bootstrap, None, security=self._security, client_id=f"{self._name}-tail"
        )
        await self._consumer.start()
        try:
            self._consumer.assign(self._tps)
            await self._consumer.seek_to_beginning(*self._tps)
        except BaseException:
            await self._consumer.stop()
            raise
        self._task = asyncio.create_task(self._follow(), name=f"{self._name}-tail")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        if self._consumer is not None:
            await self._consumer.stop()
            self._consumer = None

    async def sync(self, timeout_s: float) -> None:
        """Wait until every record present now has been applied (TimeoutError after timeout_s)."""
        if self._task is None:
            raise RuntimeError(f"{self._name}: tail not started")
        ends: dict[Any, int] = await self._consumer.end_offsets(self._tps)
        async with asyncio.timeout(timeout_s):
            async with self._progress:
                await self._progress.wait_for(lambda: self._behind(ends) == [] or self._dead())
        if self._task.done():
            self._task.result()  # re-raise what stopped the tail
        self.caught_up_once = True

    def _dead(self) -> bool:
        return self._task is None or self._task.done()

    def _behind(self, ends: dict[Any, int]) -> list[Any]:
        return [tp for tp, end in ends.items() if self._positions.get(tp, 0) < end]

    async def _follow(self) -> None:
        try:
            await self._follow_forever()
        except Exception:
            log.exception("%s: tail stopped", self._name)
            async with self._progress:
                self._progress.notify_all()  # wake sync() so it re-raises
            raise

    async def _follow_forever(self) -> None:
        while True:
            batch = await self._consumer.getmany(timeout_ms=self._poll_ms)
            for records in batch.values():
                for raw in records:
                    self._apply_one(InRecord.from_consumer(raw))
            positions = {tp: await self._consumer.position(tp) for tp in self._tps}
            async with self._progress:
                self._positions = positions
                self._progress.notify_all()

    def _apply_one(self, rec: InRecord) -> None:
        try:
            self._apply(rec)
        except SchemaError as exc:
            log.warning("%s: unreadable record at %s skipped: %s", self._name, rec.where, exc)
            if self._on_error is not None:
                self._on_error(rec, exc)
        except Exception as exc:
            log.exception("%s: record at %s could not be applied", self._name, rec.where)
            if self._on_error is not None:
                self._on_error(rec, exc)
