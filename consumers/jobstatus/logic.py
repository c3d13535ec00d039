"""The job status service's processor: job events and decisions in, `jobs.status` out, and
`decision_overdue` alerts on `failover.alerts` when a termination's decision is late."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace

from consumers.jobstatus import deadline
from consumers.jobstatus.flow import advance, step_for_decision, step_for_event
from consumers.jobstatus.metrics import JobStatusMetrics
from consumers.runtime.loop import Ack
from consumers.runtime.records import InRecord, Output, now_ms
from schemas.codec import loads
from schemas.decisions import Decision
from schemas.errors import SchemaError
from schemas.event_time import EventTimeBounds
from schemas.jobs import JobEvent
from schemas.status import Awaiting, JobStatus, Step
from schemas.topics import TopicNames

log = logging.getLogger(__name__)

AwaitingUpdate = Callable[[JobStatus], tuple[Awaiting, ...]]


class StatusTable:
    """The latest `jobs.status` value per job, newest offset wins (tail and own writes), with
    an index of the terminations awaiting a decision (rebuilt with the table on restart)."""

    def __init__(self) -> None:
        self._latest: dict[str, tuple[tuple[int, int], JobStatus]] = {}
        self.waiting: dict[str, int] = {}  # job -> earliest read_ms of a wait not overdue yet
        self.overdue: dict[str, int] = {}  # job -> attempts overdue
        self.awaited: dict[str, int] = {}  # job -> attempts awaiting a decision

    def apply_record(self, rec: InRecord) -> None:
        if rec.value is not None:
            self.apply(JobStatus.from_dict(loads(rec.value)), rec.partition, rec.offset)

    def apply(self, status: JobStatus, partition: int, offset: int) -> None:
        known = self._latest.get(status.job_id)
        if known is None or known[0][0] != partition or offset > known[0][1]:
            self._latest[status.job_id] = ((partition, offset), status)
            self._index(status)

    def _index(self, status: JobStatus) -> None:
        job = status.job_id
        for index, value in (
            (self.waiting, deadline.next_due_ms(status.awaiting, 0)),
            (self.overdue, deadline.overdue_count(status) or None),
            (self.awaited, len(status.awaiting) or None),
        ):
            if value is None:
                index.pop(job, None)
            else:
                index[job] = value

    def get(self, job_id: str) -> JobStatus | None:
        known = self._latest.get(job_id)
        return None if known is None else known[1]

    def partition(self, job_id: str) -> int | None:
        """The job's partition (its key's, the same on every job-keyed topic)."""
        known = self._latest.get(job_id)
        return None if known is None else known[0][0]

    def __len__(self) -> int:
        return len(self._latest)


class JobStatusProcessor:
    def __init__(
        self,
        names: TopicNames,
        table: StatusTable,
        metrics: JobStatusMetrics,
        *,
        deadline_ms: int,  # the service's setting (GPUFAILOVER_DECISION_DEADLINE_S)
        history_max: int = 50,
        clock: Callable[[], int] = now_ms,
        sync: Callable[[], Awaitable[None]] | None = None,
        bounds: EventTimeBounds | None = None,
    ) -> None:
        self.names, self.table, self.metrics = names, table, metrics
        self.history_max, self.deadline_ms = history_max, deadline_ms
        self._clock, self._sync = clock, sync
        # Decisions out of the event-time bounds are dead-lettered here, their owner; the
        # quarantine and requeue services skip them (schemas.event_time). None: unit tests.
        self._bounds = bounds
        self._staged: dict[str, JobStatus] = {}
        self._counts: list[Callable[[], None]] = []

    async def prepare(self, records: Sequence[InRecord]) -> None:
        return None

    def begin(self) -> None:
        self._staged, self._counts = {}, []

    def rollback(self) -> None:
        self._staged, self._counts = {}, []

    async def on_assigned(self) -> None:
        if self._sync is not None:
            await self._sync()

    async def idle(self) -> None:
        self.metrics.jobs.set(len(self.table))
        self.metrics.awaited.set(sum(self.table.awaited.values()))
        self.metrics.overdue.set(sum(self.table.overdue.values()))

    def handle(self, rec: InRecord) -> list[Output]:
        value = rec.json()
        if rec.topic == self.names.jobs_events:
            event = JobEvent.from_dict(value)
            if event.type != "terminated":
                return self._update(event.job_id, step_for_event(event), event.type)
            read_ms = self._clock()
            return self._update(
                event.job_id,
                step_for_event(event),
                event.type,
                lambda s: deadline.on_termination(s, event.attempt, event.ts_ms, read_ms),
            )
        if rec.topic == self.names.failover_decisions:
            d = Decision.from_dict(value)
            if self._bounds is not None:
                self._bounds.check("decided_ts_ms", d.decided_ts_ms, self._clock())
            return self._update(
                d.job_id,
                step_for_decision(d),
                "decision",
                lambda s: deadline.on_decision(s.awaiting, d.attempt),
            )
        raise SchemaError("topic", f"not an input of the job status service: {rec.topic!r}")

    def due(self, ready: frozenset[tuple[str, int]]) -> list[Output]:
        """Overdue alerts for the waits that ran out, on partitions whose decisions have been
        read to their end (a decision still unread is not a missing one). Each goes out with
        the status record that marks it overdue, in one transaction: it fires once."""
        now = self._clock()
        out: list[Output] = []
        for job_id, read_ms in list(self.table.waiting.items()):
            if read_ms + self.deadline_ms > now:
                continue
            if (self.names.failover_decisions, self.table.partition(job_id)) not in ready:
                continue
            status = self._staged.get(job_id) or self.table.get(job_id)
            if status is None:
                continue
            late = deadline.newly_overdue(status.awaiting, now, self.deadline_ms)
            if not late:
                continue
            new = deadline.mark_overdue(status, late, now)
            self._staged[job_id] = new
            out.append(Output.json(self.names.jobs_status, job_id, new.to_dict()))
            for wait in late:
                alert = deadline.overdue_alert(job_id, wait, self.deadline_ms, now)
                out.append(Output.json(self.names.failover_alerts, job_id, alert.to_dict()))
                self._counts.append(self.metrics.overdue_total.inc)
                log.warning(
                    "decision overdue: job %s attempt %d terminated at %d, read %.0f s ago, "
                    "no decision (deadline %.0f s)",
                    job_id,
                    wait.attempt,
                    wait.terminated_ts_ms,
                    (now - wait.read_ms) / 1000,
                    self.deadline_ms / 1000,
                )
        return out

    def _update(
        self, job_id: str, step: Step | None, event: str, awaiting: AwaitingUpdate | None = None
    ) -> list[Output]:
        current = self._staged.get(job_id) or self.table.get(job_id)
        new = current
        if step is not None:
            new = advance(current, job_id, step, self.history_max) or current
        if new is not None and awaiting is not None:
            new = replace(new, awaiting=awaiting(new))
        if new is None or new == current:
            self._counts.append(lambda: self.metrics.unchanged.labels(event=event).inc())
            return []
        self._staged[job_id] = new
        status = new.current.status
        self._counts.append(lambda: self.metrics.updates.labels(status=status).inc())
        return [Output.json(self.names.jobs_status, job_id, new.to_dict())]

    async def committed(self, acks: Sequence[Ack]) -> None:
        staged, counts = self._staged, self._counts
        self._staged, self._counts = {}, []
        for ack in acks:
            if ack.output.topic == self.names.jobs_status and ack.output.key is not None:
                job_id = ack.output.key.decode("utf-8")
                self.table.apply(staged[job_id], ack.partition, ack.offset)
        for count in counts:
            count()
