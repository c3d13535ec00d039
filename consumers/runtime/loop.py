"""The consume-process-produce loop every service runs, one Kafka transaction per batch.

Per batch: decode and process each record (a record that fails goes to its dead-letter topic
with its coordinates and the error: never a crash, never a silent skip; a malformed record of a
topic another component owns is counted and skipped, as that one dead-letters it), then publish
every output and commit the batch's offsets in one transaction. The output is acknowledged
(acks=all) before the offsets count, and a restart resumes exactly after the last committed
batch. When a transaction fails, the processor's staged state is dropped, the consumer seeks
back to the batch and the batch is processed again with a new producer.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from consumers.runtime.metrics import LoopMetrics
from consumers.runtime.records import InRecord, Output, dead_letter, owned_elsewhere
from deploy.topics import TopicNames
from gpufailover.kafka import make_consumer, make_producer
from gpufailover.offsets import PartitionProbe
from gpufailover.security import PLAINTEXT, KafkaSecurity
from schemas.dead_letter import COMPONENTS as DEAD_LETTER_COMPONENTS
from schemas.errors import SchemaError

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Ack:
    """An output as the broker acknowledged it."""

    output: Output
    partition: int
    offset: int


class Processor(Protocol):
    async def prepare(self, records: Sequence[InRecord]) -> None:
        """Before a batch is handled (e.g. let a tail catch up)."""

    def begin(self) -> None:
        """A batch starts: changes from here on are staged until committed or rolled back."""

    def handle(self, rec: InRecord) -> list[Output]:
        """Outputs for one record; raise SchemaError when the record is malformed."""

    def rollback(self) -> None:
        """The batch's transaction failed: drop staged changes."""

    async def committed(self, acks: Sequence[Ack]) -> None:
        """The batch's transaction committed: staged changes become state; run side effects."""

    async def on_assigned(self) -> None:
        """Partitions were assigned: bring state up to date before processing them."""

    async def idle(self) -> None:
        """Called on every loop turn, batch or not."""

    def due(self, ready: frozenset[tuple[str, int]]) -> list[Output]:
        """Outputs a timer owes now (staged like `handle`'s, committed in their own
        transaction). `ready`: the assigned (topic, partition)s read to their end as of the
        last fetch: only what they cover is known to be complete."""


@dataclass(frozen=True)
class LoopConfig:
    bootstrap: str
    group_id: str
    transactional_id: str
    topics: tuple[str, ...]
    names: TopicNames
    poll_ms: int = 500
    batch_max: int = 500
    retry_backoff_s: float = 1.0
    security: KafkaSecurity = PLAINTEXT


def _fatal_errors() -> tuple[type[BaseException], ...]:
    from aiokafka import errors

    return (
        errors.ProducerFenced,
        errors.TransactionalIdAuthorizationFailed,
        errors.TopicAuthorizationFailedError,
        errors.GroupAuthorizationFailedError,
        errors.ClusterAuthorizationFailedError,
    )


class _Listener:
    """aiokafka rebalance listener: catch state up when partitions arrive."""

    def __init__(self, processor: Processor) -> None:
        self._processor = processor

    async def on_partitions_revoked(self, revoked: Any) -> None:
        log.info("partitions revoked: %s", sorted(str(tp) for tp in revoked))

    async def on_partitions_assigned(self, assigned: Any) -> None:
        log.info("partitions assigned: %s", sorted(str(tp) for tp in assigned))
        try:
            await self._processor.on_assigned()
        except Exception:
            # Processing goes on from the state as read so far; the tails keep following.
            log.exception("could not bring state up to date on assignment")


class TransactionalLoop:
    def __init__(self, cfg: LoopConfig, processor: Processor, metrics: LoopMetrics) -> None:
        if metrics.component not in DEAD_LETTER_COMPONENTS:
            # Fail at startup, not at the first bad record (its dead letter names the component).
            raise ValueError(f"{metrics.component!r} is not a component in schemas.dead_letter")
        self._cfg = cfg
        self._processor = processor
        self._metrics = metrics
        self._producer: Any = None

    async def run(self, stop: asyncio.Event) -> None:
        from aiokafka import ConsumerRebalanceListener

        # aiokafka insists on an instance of its (untyped) base class: mix it in at run time.
        listener = type("Listener", (_Listener, ConsumerRebalanceListener), {})(self._processor)
        from aiokafka.coordinator.assignors.range import RangePartitionAssignor

        # Range assignment gives one member partition p of every topic it reads: the topics
        # are co-partitioned by job or node, so a job's events and its decisions meet in the
        # same instance (round-robin could split them between two).
        consumer = make_consumer(
            self._cfg.bootstrap,
            self._cfg.group_id,
            security=self._cfg.security,
            partition_assignment_strategy=(RangePartitionAssignor,),
        )
        await consumer.start()
        try:
            consumer.subscribe(list(self._cfg.topics), listener=listener)
            await self._new_producer()
            while not stop.is_set():
                batch = await consumer.getmany(
                    timeout_ms=self._cfg.poll_ms, max_records=self._cfg.batch_max
                )
                if batch and not await self._process(consumer, batch):
                    await _wait(stop, self._cfg.retry_backoff_s)
                else:
                    self._metrics.last_progress.set_to_current_time()
                ready = await self._report_lag(consumer)
                if not await self._flush_due(ready):
                    await _wait(stop, self._cfg.retry_backoff_s)
                await self._processor.idle()
        finally:
            await self._close_producer()
            await consumer.stop()

    async def _new_producer(self) -> None:
        await self._close_producer()
        producer = make_producer(
            self._cfg.bootstrap,
            f"{self._cfg.group_id}-producer",
            security=self._cfg.security,
            transactional_id=self._cfg.transactional_id,
        )
        await producer.start()
        self._producer = producer

    async def _close_producer(self) -> None:
        if self._producer is not None:
            producer, self._producer = self._producer, None
            with contextlib.suppress(Exception):
                await producer.stop()

    async def _process(self, consumer: Any, batch: dict[Any, list[Any]]) -> bool:
        """Process and commit one batch; False when it must be retried."""
        records = [InRecord.from_consumer(r) for recs in batch.values() for r in recs]
        await self._processor.prepare(records)
        self._processor.begin()
        outputs = [out for rec in records for out in self._handle(rec)]
        offsets = {tp: recs[-1].offset + 1 for tp, recs in batch.items()}

        def retry_batch(exc: BaseException) -> None:
            first = {tp: recs[0].offset for tp, recs in batch.items()}
            log.warning("transaction failed (%r); retrying from %s", exc, _fmt(first))
            for tp, offset in first.items():
                consumer.seek(tp, offset)

        return await self._transact(outputs, offsets, retry_batch)

    async def _flush_due(self, ready: frozenset[tuple[str, int]]) -> bool:
        """Publish what the processor's timers owe, in one transaction; False on failure (the
        staged changes are dropped and the timers fire again on a later turn)."""
        self._processor.begin()
        outputs = self._processor.due(ready)
        if not outputs:
            return True

        def retry_later(exc: BaseException) -> None:
            log.warning("transaction of timer outputs failed (%r); retried later", exc)

        return await self._transact(outputs, {}, retry_later)

    async def _transact(
        self,
        outputs: list[Output],
        offsets: dict[Any, int],
        on_failure: Callable[[BaseException], None],
    ) -> bool:
        """Publish `outputs` and commit `offsets` in one transaction, then hand the acks to the
        processor. False when it failed: staged changes dropped, `on_failure` told, and a new
        producer made for the retry."""
        from aiokafka.errors import KafkaError

        started = time.perf_counter()
        try:
            acks = await self._publish(outputs, offsets)
        except _fatal_errors():
            self._processor.rollback()
            raise
        except (KafkaError, OSError, TimeoutError) as exc:
            self._processor.rollback()
            self._metrics.commit_failures.inc()
            on_failure(exc)
            await self._new_producer()
            return False
        if offsets:  # a batch's commit (timer outputs commit no offsets)
            self._metrics.commit_seconds.observe(time.perf_counter() - started)
        for ack in acks:
            self._metrics.produced.labels(topic=self._logical(ack.output.topic)).inc()
        await self._processor.committed(acks)
        return True

    async def _report_lag(self, consumer: Any) -> frozenset[tuple[str, int]]:
        """Lag of each assigned partition (`gpufailover.offsets`: its last stable offset minus
        the next offset to consume, as of the last fetch). Returns the partitions read to that
        end."""
        probe = PartitionProbe()
        await probe.refresh(consumer, consumer.assignment())
        for topic, partition, behind in probe.lags():
            self._metrics.lag.labels(topic=self._logical(topic), partition=str(partition)).set(
                behind
            )
        return probe.read_to_end()

    async def _publish(self, outputs: list[Output], offsets: dict[Any, int]) -> list[Ack]:
        futures = []
        async with self._producer.transaction():
            for out in outputs:
                futures.append(await self._producer.send(out.topic, out.value, key=out.key))
            metadata = [await fut for fut in futures]
            if offsets:
                await self._producer.send_offsets_to_transaction(offsets, self._cfg.group_id)
        return [
            Ack(out, md.partition, md.offset) for out, md in zip(outputs, metadata, strict=True)
        ]

    def _handle(self, rec: InRecord) -> list[Output]:
        topic = self._logical(rec.topic)
        self._metrics.records.labels(topic=topic).inc()
        error: Exception
        try:
            return self._processor.handle(rec)
        except SchemaError as exc:
            component = self._metrics.component
            owner = owned_elsewhere(self._cfg.names, rec.topic, component)
            if owner is not None:
                # One dead letter per bad record: its topic's owner writes it, not every reader.
                log.warning(
                    "malformed record at %s skipped (%s dead-letters it): %s", rec.where, owner, exc
                )
                self._metrics.skipped_bad.labels(topic=topic).inc()
                return []
            log.warning("malformed record at %s dead-lettered: %s", rec.where, exc)
            kind, error = "decode", exc
        except Exception as exc:
            log.exception("record at %s could not be processed; dead-lettered", rec.where)
            kind, error = "process", exc
        self._metrics.dlq.labels(topic=topic, error=kind).inc()
        return [
            dead_letter(
                self._cfg.names, rec, kind, error, self._metrics.component, self._cfg.group_id
            )
        ]

    def _logical(self, real: str) -> str:
        try:
            return self._cfg.names.logical(real)
        except KeyError:
            return real


async def _wait(stop: asyncio.Event, seconds: float) -> None:
    """Back off before a retry, but return at once when asked to stop."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), seconds)


def _fmt(offsets: dict[Any, int]) -> str:
    return ", ".join(f"{tp.topic}[{tp.partition}]@{off}" for tp, off in sorted(offsets.items()))
