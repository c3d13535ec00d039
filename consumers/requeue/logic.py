"""The requeue rule: a failover/retry decision becomes one `jobs.requeue` command.

exclude_nodes = the decision's suspects + every node quarantined now (as far as this service
has read `nodes.quarantine`): the service never waits for the quarantine service or a repair.
A decision for a (job_id, attempt) already requeued publishes nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

from consumers.quarantine.table import QuarantineTable
from consumers.requeue.metrics import RequeueMetrics
from consumers.requeue.state import JobSpecs, Requeued
from consumers.runtime.loop import Ack
from consumers.runtime.records import InRecord, Output, now_ms
from schemas.decisions import Decision
from schemas.errors import SchemaError
from schemas.event_time import EventTimeBounds
from schemas.requeue import RequeueCommand
from schemas.topics import TopicNames

log = logging.getLogger(__name__)

REQUEUE_ACTIONS = frozenset({"failover", "retry"})


def exclude_nodes(suspects: Sequence[str], quarantined: frozenset[str]) -> tuple[str, ...]:
    return tuple(sorted(set(suspects) | quarantined))


def boosted_priority(base: int | None, action: str, failover_boost: int, retry_boost: int) -> int:
    return (base or 0) + (failover_boost if action == "failover" else retry_boost)


def command_for(
    d: Decision,
    specs: JobSpecs,
    quarantined: frozenset[str],
    *,
    failover_boost: int,
    retry_boost: int,
    now: int,
) -> RequeueCommand:
    info = specs.get(d.job_id)
    return RequeueCommand(
        job_id=d.job_id,
        attempt=d.attempt,
        next_attempt=d.attempt + 1 if d.next_attempt is None else d.next_attempt,
        spec=None if info is None else info.spec,
        exclude_nodes=exclude_nodes(d.suspect_nodes, quarantined),
        priority=boosted_priority(
            None if info is None else info.priority, d.action, failover_boost, retry_boost
        ),
        reason=d.rule,
        verdict=d.verdict,
        action=d.action,
        decided_ts_ms=d.decided_ts_ms,
        ts_ms=now,
        checkpoint=d.checkpoint,  # resume from the last checkpoint the job reported
    )


@dataclass
class _Staged:
    done: dict[str, int] = field(default_factory=dict)
    on_commit: list[Callable[[], object]] = field(default_factory=list)


class RequeueProcessor:
    def __init__(
        self,
        names: TopicNames,
        quarantine: QuarantineTable,
        specs: JobSpecs,
        requeued: Requeued,
        metrics: RequeueMetrics,
        *,
        failover_boost: int = 100,
        retry_boost: int = 0,
        sync: Callable[[float], Awaitable[None]] | None = None,
        spec_wait_s: float = 5.0,
        bounds: EventTimeBounds | None = None,
        clock: Callable[[], int] = now_ms,
    ) -> None:
        # Decisions out of the event-time bounds are skipped (job status dead-letters them),
        # as the quarantine service skips them: schemas.event_time. None: unit tests.
        self._bounds, self._clock = bounds, clock
        self.names, self.quarantine, self.specs, self.requeued = names, quarantine, specs, requeued
        self.metrics, self.failover_boost, self.retry_boost = metrics, failover_boost, retry_boost
        self._sync, self._spec_wait_s = sync, spec_wait_s
        self._staged = _Staged()

    async def prepare(self, records: Sequence[InRecord]) -> None:
        """Let the tails catch up when a decision names a job whose events were not read yet."""
        unknown = [r for r in records if r.key_str() not in self.specs.jobs]
        if unknown and self._sync is not None:
            try:
                await self._sync(self._spec_wait_s)
            except TimeoutError:
                log.warning("tails not caught up after %.1f s; going on", self._spec_wait_s)

    def begin(self) -> None:
        self._staged = _Staged()

    def rollback(self) -> None:
        self._staged = _Staged()

    async def on_assigned(self) -> None:
        if self._sync is not None:
            await self._sync(60.0)

    async def idle(self) -> None:
        return None

    def due(self, ready: frozenset[tuple[str, int]]) -> list[Output]:
        return []

    def handle(self, rec: InRecord) -> list[Output]:
        if rec.topic != self.names.failover_decisions:
            raise SchemaError("topic", f"not an input of the requeue service: {rec.topic!r}")
        d = Decision.from_dict(rec.json())
        if self._bounds is not None:
            self._bounds.check("decided_ts_ms", d.decided_ts_ms, self._clock())
        if d.action not in REQUEUE_ACTIONS:
            self._count(lambda: self.metrics.skipped.labels(action=d.action).inc())
            return []
        if self.requeued.done(d.job_id, d.attempt) or self._staged.done.get(d.job_id, -1) >= (
            d.attempt
        ):
            self._count(self.metrics.duplicates.inc)
            log.info("decision for %s attempt %d already requeued: skipped", d.job_id, d.attempt)
            return []
        command = command_for(
            d,
            self.specs,
            self.quarantine.quarantined(),
            failover_boost=self.failover_boost,
            retry_boost=self.retry_boost,
            now=now_ms(),
        )
        self._staged.done[d.job_id] = d.attempt
        self._count(lambda: self.metrics.commands.labels(reason=command.reason).inc())
        self._count(lambda: self.metrics.exclude_nodes.observe(len(command.exclude_nodes)))
        if command.spec is None:
            self._count(self.metrics.spec_missing.inc)
            log.warning("requeue of %s without a spec: no jobs.events record of it", d.job_id)
        log.info(
            "requeue %s attempt %d -> %d excluding %s",
            d.job_id,
            d.attempt,
            command.next_attempt,
            list(command.exclude_nodes),
        )
        return [Output.json(self.names.jobs_requeue, d.job_id, command.to_dict())]

    async def committed(self, acks: Sequence[Ack]) -> None:
        staged, self._staged = self._staged, _Staged()
        for job_id, attempt in staged.done.items():
            self.requeued.add(job_id, attempt)
        for count in staged.on_commit:
            count()

    def _count(self, inc: Callable[[], object]) -> None:
        self._staged.on_commit.append(inc)
