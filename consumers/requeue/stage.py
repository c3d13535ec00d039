"""The scheduler stage of the requeue service: carries out `jobs.requeue` on a scheduler, and
leaves jobs whose decision is give_up/reject/fail ended with a note saying why.

It reads `jobs.requeue` (the service's own committed commands: the excluded nodes and the
action are decided there) and `failover.decisions` in its own consumer group
`<group>-<scheduler>`, and commits a record's offset only once the scheduler has done it, so a
crash or a failed call repeats it, never loses it; each scheduler makes a repeat a no-op
(`slurm.py`, `kubernetes.py`). A failed call is retried with back-off
(`gpufailover_requeue_<scheduler>_errors_total`); a job the scheduler cannot act on (forgotten,
not requeueable) is logged and counted, not retried.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass
from typing import Any, Protocol

from prometheus_client import CollectorRegistry, Counter

from consumers.requeue.records import RequeueCommand
from consumers.runtime.records import InRecord
from deploy.topics import TopicNames
from gpufailover.backoff import Backoff
from gpufailover.kafka import make_consumer
from gpufailover.security import PLAINTEXT, KafkaSecurity
from schemas.codec import loads
from schemas.decisions import Decision
from schemas.errors import SchemaError

log = logging.getLogger(__name__)

END_ACTIONS = frozenset({"give_up", "reject", "fail"})


class NotActionable(Exception):
    """The job cannot be acted on, now or later (gone from the scheduler, not requeueable)."""


@dataclass(frozen=True)
class Outcome:
    what: str  # requeued | completed (finished a requeue started before) | running | stale | ended
    restarts: int  # the job's restart count (Slurm) or attempt (Kubernetes) after the action


class Scheduler(Protocol):
    async def requeue(self, cmd: RequeueCommand) -> Outcome: ...

    async def leave_ended(self, d: Decision) -> Outcome: ...


@dataclass(frozen=True)
class StageMetrics:
    actions: Counter  # labels: outcome (requeued|completed|running|stale|ended)
    errors: Counter
    not_actionable: Counter
    unreadable: Counter

    @staticmethod
    def create(scheduler: str, registry: CollectorRegistry | None = None) -> StageMetrics:
        r = CollectorRegistry() if registry is None else registry
        p, what = f"gpufailover_requeue_{scheduler}", scheduler.capitalize()
        return StageMetrics(
            actions=Counter(
                f"{p}_actions_total", f"{what} actions done, by outcome", ["outcome"], registry=r
            ),
            errors=Counter(f"{p}_errors_total", f"{what} calls that failed (retried)", registry=r),
            not_actionable=Counter(
                f"{p}_not_actionable_total",
                f"Jobs {what} cannot act on (forgotten, not requeueable): logged, not retried",
                registry=r,
            ),
            unreadable=Counter(
                f"{p}_unreadable_total",
                "Records skipped as unreadable (their topic's owner dead-letters them)",
                registry=r,
            ),
        )


class SchedulerStage:
    def __init__(
        self,
        name: str,
        bootstrap: str,
        group_id: str,
        names: TopicNames,
        scheduler: Scheduler,
        metrics: StageMetrics,
        backoff: Backoff,
        *,
        security: KafkaSecurity = PLAINTEXT,
    ) -> None:
        self.name, self.bootstrap, self.group_id, self.names = name, bootstrap, group_id, names
        self.scheduler, self.metrics, self.backoff = scheduler, metrics, backoff
        self.security = security

    async def run(self, stop: asyncio.Event) -> None:
        consumer = make_consumer(self.bootstrap, self.group_id, security=self.security)
        await consumer.start()
        try:
            consumer.subscribe([self.names.jobs_requeue, self.names.failover_decisions])
            while not stop.is_set():
                batch = await consumer.getmany(timeout_ms=500)
                for tp, records in batch.items():
                    for raw in records:
                        if not await self._until_done(InRecord.from_consumer(raw), stop):
                            return  # stopped while retrying: not committed, redone next start
                        await consumer.commit({tp: raw.offset + 1})
        finally:
            await consumer.stop()

    async def _until_done(self, rec: InRecord, stop: asyncio.Event) -> bool:
        failures = 0
        while not stop.is_set():
            try:
                outcome = await self.handle(rec)
            except NotActionable as exc:
                self.metrics.not_actionable.inc()
                log.warning("%s: %s not carried out: %s", self.name, rec.where, exc)
                return True
            except Exception:
                failures += 1
                self.metrics.errors.inc()
                delay = self.backoff.delay_ms(failures) / 1000
                log.exception("%s: %s failed %d time(s); retrying in %.1f s", self.name,
                              rec.where, failures, delay)  # fmt: skip
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), delay)
                continue
            if outcome is not None:
                self.metrics.actions.labels(outcome=outcome.what).inc()
            return True
        return False

    async def handle(self, rec: InRecord) -> Outcome | None:
        value = self._decode(rec)
        if value is None:
            return None
        try:
            if rec.topic == self.names.jobs_requeue:
                return await self.scheduler.requeue(RequeueCommand.from_dict(value))
            d = Decision.from_dict(value)
        except SchemaError as exc:
            self.metrics.unreadable.inc()
            log.warning("%s: unreadable record at %s skipped: %s", self.name, rec.where, exc)
            return None
        if d.action in END_ACTIONS:
            return await self.scheduler.leave_ended(d)
        return None  # failover/retry: done from its jobs.requeue command

    def _decode(self, rec: InRecord) -> Any:
        if rec.value is None:
            return None
        try:
            return loads(rec.value)
        except SchemaError as exc:
            self.metrics.unreadable.inc()
            log.warning("%s: unreadable record at %s skipped: %s", self.name, rec.where, exc)
            return None
