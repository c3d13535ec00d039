"""Kafka glue of the signal filter: batches in with aiokafka, reduced records out, then commit.

Runs inside the classifier worker, beside the faust agents, in its own consumer group
(`<app id>-signals`). The range assignor gives one member the same partition number of all
three inputs, which the partition's watermark needs. At-least-once: offsets are committed
only after everything forwarded up to them is acknowledged; a record seen twice after a crash
adds to a count or answers a termination twice, both of which the node and job sides absorb;
so does a rebalance, which hands partitions over from their last commit.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from aiokafka.structs import TopicPartition

from gpufailover.kafka import make_consumer, make_producer
from gpufailover.offsets import PartitionProbe
from gpufailover.security import PLAINTEXT, KafkaSecurity
from schemas.event_time import EventTimeBounds
from schemas.topics import DLQ_SUFFIX, TopicNames
from streams.clock import now_ms
from streams.fetch_wait import FETCH_MAX_WAIT_MS
from streams.policy import Policy
from streams.raw_fetch import install as install_raw_fetch
from streams.raw_fetch import raw_records
from streams.signal_filter import DRAINING_RECORDS, SignalFilter

log = logging.getLogger("gpufailover.classifier")
POLL_MS = 100
BATCH_MAX = 5_000
COMMIT_EVERY_MS = 1_000
# Every output on a hardware decision's way waits this long to share a request (the agents'
# too: `producer_linger` in streams/app.py): 2 ms, not 5, took ~10 ms off the decision's p50
# and p99 at 5,000 rec/s for ~8% more CPU a record (BENCHMARKS.md, issue 18, fifth pass).
PRODUCER_LINGER_MS = 2
TURN_TIMEOUT_S = 120.0
# A worker asked to stop must stop: Kubernetes kills it after its grace period (30 s by default).
CLOSE_STEP_TIMEOUT_S = 8.0


async def close_within(
    steps: list[tuple[str, Callable[[], Awaitable[Any]]]], timeout_s: float
) -> None:
    """Run each closing step, each bounded by `timeout_s`; a step that fails or hangs is logged
    and the next one runs. Safe to skip: what was not committed is read again (at least once),
    and the node and job sides absorb repeats."""
    for what, step in steps:
        try:
            await asyncio.wait_for(step(), timeout_s)
        except TimeoutError:
            log.warning(
                "signal filter: %s took over %g s: skipped (records re-read)", what, timeout_s
            )
        except Exception as exc:  # noqa: BLE001 - stopping anyway; say what it means
            log.warning("signal filter: %s failed (%r): skipped (records re-read)", what, exc)


class FilterMetrics(Protocol):
    """What the loop counts: `ClassifierMetrics` in the worker, `MetricsRelay` in a child."""

    def record(self, topic: str, agent: str, n: int = 1) -> None: ...
    def sent(self, topic: str, n: int = 1) -> None: ...
    def dead_letter(self, topic: str, kind: str, n: int = 1) -> None: ...
    def xid(self, code: int, n: int = 1) -> None: ...
    def health(self, condition: str, n: int = 1) -> None: ...


class SignalLoop:
    def __init__(
        self,
        bootstrap: str,
        group_id: str,
        names: TopicNames,
        policy: Policy,
        idle_after_ms: int,
        metrics: FilterMetrics,
        bounds: EventTimeBounds | None = None,
        *,
        security: KafkaSecurity = PLAINTEXT,
    ) -> None:
        self.bootstrap = bootstrap
        self.security = security
        self.group_id = group_id
        self.names = names
        self.metrics = metrics
        self.filter = SignalFilter(
            policy, names, idle_after_ms, self._lagging, bounds, backlog=self._backlog
        )
        self.topics = self.filter.sources
        self.consumer: Any = None
        self.producer: Any = None
        self.probe = PartitionProbe()  # ends and positions of the inputs, as of the last fetch
        self.pending: list[asyncio.Future[Any]] = []
        self.uncommitted: dict[TopicPartition, int] = {}
        self.last_commit_wall = 0

    # -- what the faust side asks -----------------------------------------------------------
    def lag(self) -> list[tuple[str, int, int]]:
        """(logical topic, partition, records not processed yet) per assigned input."""
        return [(self.names.logical(t), p, n) for t, p, n in self.probe.lags()]

    def draining(self) -> bool:
        """Is the filter draining a backlog on any input it reads (`DRAINING_RECORDS`)?"""
        return any(n > DRAINING_RECORDS for _, _, n in self.probe.lags())

    def _lagging(self, topic: str, partition: int) -> bool:
        # False when not assigned here: its owner's filter holds its own watermark.
        return self.probe.lagging((topic, partition))

    def _backlog(self, topic: str, partition: int) -> int:
        return self.probe.backlog((topic, partition))

    # -- the loop ---------------------------------------------------------------------------
    async def run(self) -> None:
        from aiokafka import ConsumerRebalanceListener
        from aiokafka.coordinator.assignors.range import RangePartitionAssignor

        loop = self

        class Listener(ConsumerRebalanceListener):  # type: ignore[misc]
            async def on_partitions_revoked(self, revoked: Any) -> None:
                # No commit here: awaiting a commit inside aiokafka's rebalance callback stalled
                # both workers of a 2-worker run. The new owner re-reads from the last commit
                # (at most COMMIT_EVERY_MS of records, seen twice).
                for tp in revoked:
                    loop.uncommitted.pop(tp, None)
                loop.filter.forget({tp.partition for tp in revoked})
                loop.probe.forget((tp.topic, tp.partition) for tp in revoked)

            async def on_partitions_assigned(self, assigned: Any) -> None:
                log.info("signal filter assigned %s", sorted(str(tp) for tp in assigned))

        install_raw_fetch()
        self.consumer = make_consumer(
            self.bootstrap,
            self.group_id,
            security=self.security,
            partition_assignment_strategy=(RangePartitionAssignor,),
            max_partition_fetch_bytes=4 * 1024 * 1024,
            fetch_max_wait_ms=FETCH_MAX_WAIT_MS,
            key_deserializer=raw_records,  # decoded records, no ConsumerRecord each
        )
        self.producer = make_producer(
            self.bootstrap,
            f"{self.group_id}-producer",
            security=self.security,
            linger_ms=PRODUCER_LINGER_MS,
        )
        await self.producer.start()
        await self.consumer.start()
        try:
            self.consumer.subscribe(list(self.topics), listener=Listener())
            while True:
                # A turn takes milliseconds (a rebalance, seconds). We have seen the loop stall
                # after a 2-worker rebalance (cause unknown, BENCHMARKS.md): crash the worker
                # rather than let it look alive while the node side decides nothing.
                try:
                    await asyncio.wait_for(self._turn(), TURN_TIMEOUT_S)
                except TimeoutError:
                    raise RuntimeError(
                        f"signal filter made no progress for {TURN_TIMEOUT_S:.0f} s"
                    ) from None
        finally:
            await close_within(
                [
                    ("last commit", self._commit),
                    ("consumer stop", self.consumer.stop),
                    ("producer stop", self.producer.stop),
                ],
                CLOSE_STEP_TIMEOUT_S,
            )

    async def _turn(self) -> None:
        consumer = self.consumer
        batch = await consumer.getmany(timeout_ms=POLL_MS, max_records=BATCH_MAX)
        wall = now_ms()
        # Keyed by TopicPartition (a (topic, partition) tuple), the records in offset order.
        outputs = self.filter.reduce_runs(batch.items(), wall)
        for tp, messages in batch.items():
            self.uncommitted[tp] = messages[-1].offset + 1
        await self.probe.refresh(consumer, consumer.assignment())
        outputs += self.filter.watermarks(wall)
        outputs += self.filter.idle_markers(wall, {tp.partition for tp in consumer.assignment()})
        for out in outputs:
            future = await self.producer.send(
                out.topic, out.value, key=out.key, partition=out.partition
            )
            self.pending.append(future)
        self._report(batch, outputs)
        if self.uncommitted and wall - self.last_commit_wall >= COMMIT_EVERY_MS:
            await self._commit()

    async def _commit(self) -> None:
        """Commit what was processed, once everything forwarded so far is acknowledged."""
        from aiokafka.errors import CommitFailedError, RebalanceInProgressError

        pending, self.pending = self.pending, []
        if pending:
            await asyncio.gather(*pending)  # a failed send raises: the worker stops, no commit
        offsets, self.uncommitted = self.uncommitted, {}
        self.last_commit_wall = now_ms()
        if not offsets:
            return
        try:
            await self.consumer.commit(offsets)
        except (CommitFailedError, RebalanceInProgressError) as exc:
            # Kept for the next commit while the partitions stay here; a new owner re-reads
            # from the last commit instead (repeats, never gaps).
            log.warning("signal filter commit failed (%r): retried at the next commit", exc)
            owned = self.consumer.assignment()
            for tp, offset in offsets.items():
                if tp in owned:
                    self.uncommitted[tp] = max(offset, self.uncommitted.get(tp, 0))

    def _report(self, batch: dict[Any, list[Any]], outputs: list[Any]) -> None:
        m, f, names = self.metrics, self.filter, self.names
        for tp, messages in batch.items():
            m.record(names.logical(tp.topic), "node", len(messages))
        for code, n in f.xids.items():
            m.xid(code, n)
        for condition, n in f.conditions.items():
            m.health(condition, n)
        f.xids.clear()
        f.conditions.clear()
        for out in outputs:
            if out.topic == names.node_signals:
                m.sent(names.logical(out.topic))
            else:
                m.dead_letter(names.logical(out.topic).removesuffix(DLQ_SUFFIX), "decode")
                m.sent(names.logical(out.topic))
