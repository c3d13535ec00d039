"""The actuation stage: carries out `nodes.quarantine` on the scheduler, at least once.

It consumes `nodes.quarantine` (the service's own committed writes and the operator's
releases) in its own consumer group, `<group>-actuator`, and commits a partition's offset only
up to the first record not actuated yet (see `actuation.py`). So:
- a release published while the service was down is actuated when it starts;
- an actuation that fails is retried with back-off, and after a crash from the committed
  offset: it is never lost;
- a crash between an actuation and its commit repeats that actuation once: actuators are
  idempotent (draining a drained node is a no-op).
A first start (no committed offset) actuates the topic's current content from the beginning.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any

from consumers.quarantine.actions import RELEASE
from consumers.quarantine.actuation import ActuationQueue, Owed
from consumers.quarantine.actuator import Actuator
from consumers.quarantine.metrics import QuarantineMetrics
from consumers.runtime.records import InRecord, now_ms
from gpufailover.backoff import Backoff
from gpufailover.kafka import make_consumer
from gpufailover.security import PLAINTEXT, KafkaSecurity
from schemas.codec import loads
from schemas.errors import SchemaError
from schemas.quarantine import QuarantineRecord

log = logging.getLogger(__name__)

ACTUATOR_TIMEOUT_S = 120.0  # a call that hangs counts as failed and is retried
POLL_MS = 500


class ActuationLoop:
    def __init__(
        self,
        bootstrap: str,
        group_id: str,
        topic: str,
        actuator: Actuator,
        metrics: QuarantineMetrics,
        *,
        backoff: Backoff,
        dry_run: bool = False,
        clock: Callable[[], int] = now_ms,
        security: KafkaSecurity = PLAINTEXT,
    ) -> None:
        self.group_id = group_id
        self._security = security
        self._bootstrap, self._topic = bootstrap, topic
        self._actuator, self._metrics = actuator, metrics
        self._dry_run, self._clock = dry_run, clock
        self.queue = ActuationQueue(backoff)
        self._committed: dict[int, int] = {}
        self._consumer: Any = None

    async def run(self, stop: asyncio.Event) -> None:
        from aiokafka import ConsumerRebalanceListener

        loop = self

        class Listener(ConsumerRebalanceListener):  # type: ignore[misc]
            async def on_partitions_revoked(self, revoked: Any) -> None:
                # No commit here: awaiting one inside aiokafka's rebalance callback stalled
                # the signal filter (streams/signal_loop.py). Each turn commits; the new owner
                # redoes at most one turn's actuations, which are idempotent.
                loop.queue.forget(tp.partition for tp in revoked)
                for tp in revoked:
                    loop._committed.pop(tp.partition, None)

            async def on_partitions_assigned(self, assigned: Any) -> None:
                log.info("actuator: partitions assigned: %s", sorted(str(tp) for tp in assigned))

        self._consumer = make_consumer(self._bootstrap, self.group_id, security=self._security)
        await self._consumer.start()
        try:
            self._consumer.subscribe([self._topic], listener=Listener())
            while not stop.is_set():
                batch = await self._consumer.getmany(timeout_ms=self._poll_ms())
                for records in batch.values():
                    for raw in records:
                        self._read(InRecord.from_consumer(raw))
                await self._read_positions()
                await self._actuate_due()
                await self._commit()
                self._metrics.actuations_owed.set(len(self.queue))
        finally:
            with contextlib.suppress(Exception):
                await self._commit()
            await self._consumer.stop()
            self._consumer = None

    async def _read_positions(self) -> None:
        from aiokafka.errors import IllegalStateError

        for tp in self._consumer.assignment():
            try:
                self.queue.read_to(tp.partition, await self._consumer.position(tp))
            except IllegalStateError:
                log.debug("actuator: %s revoked while reading its position", tp)

    def _poll_ms(self) -> int:
        next_try = self.queue.next_try_ms()
        if next_try is None:
            return POLL_MS
        return max(0, min(POLL_MS, next_try - self._clock()))

    def _read(self, rec: InRecord) -> None:
        record: QuarantineRecord | None = None
        if rec.value is not None:
            try:
                record = QuarantineRecord.from_dict(loads(rec.value))
            except SchemaError as exc:
                # The table tail counts it (table_errors); nothing here to actuate.
                log.warning("actuator: unreadable record at %s not actuated: %s", rec.where, exc)
        self.queue.read(rec.partition, rec.offset, record)

    async def _actuate_due(self) -> None:
        for owed in self.queue.due(self._clock()):
            if await self._actuate(owed):
                self.queue.succeeded(owed)
                if owed.action == RELEASE:
                    self._metrics.releases.inc()
            else:
                delay = self.queue.failed(owed, self._clock())
                log.warning(
                    "actuator: %s of %s failed %d time(s); retrying in %.1f s",
                    owed.action,
                    owed.record.node,
                    owed.failures,
                    delay / 1000,
                )

    async def _actuate(self, owed: Owed) -> bool:
        action, record = owed.action, owed.record
        if self._dry_run:
            log.info("dry run: would run %s", self._actuator.command(action, record))
            return True
        self._metrics.actuator_calls.labels(action=action).inc()
        try:
            async with asyncio.timeout(ACTUATOR_TIMEOUT_S):
                await self._actuator.apply(action, record)
        except Exception:
            self._metrics.actuator_errors.labels(action=action).inc()
            log.exception(
                "actuator %s failed to %s %s (nodes.quarantine[%d]@%d)",
                self._actuator.name,
                action,
                record.node,
                owed.partition,
                owed.offset,
            )
            return False
        log.info("actuated: %s %s (%s)", action, record.node, record.reason)
        return True

    async def _commit(self) -> None:
        from aiokafka import TopicPartition
        from aiokafka.errors import KafkaError

        if self._consumer is None:
            return
        owned = {tp.partition for tp in self._consumer.assignment()}
        advanced = {
            TopicPartition(self._topic, p): off
            for p, off in self.queue.committable().items()
            if p in owned and off > self._committed.get(p, -1)
        }
        if not advanced:
            return
        try:
            await self._consumer.commit(advanced)
        except KafkaError as exc:  # e.g. a rebalance in progress: the next turn commits
            log.warning("actuator: commit of %s failed, retried next turn: %r", advanced, exc)
            return
        for tp, off in advanced.items():
            self._committed[tp.partition] = off
