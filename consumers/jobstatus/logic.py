"""The job status service's processor: job events and decisions in, `jobs.status` out."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence

from consumers.jobstatus.flow import advance, step_for_decision, step_for_event
from consumers.jobstatus.metrics import JobStatusMetrics
from consumers.jobstatus.records import JobStatus, Step
from consumers.runtime.loop import Ack
from consumers.runtime.records import InRecord, Output
from deploy.topics import TopicNames
from schemas.codec import loads
from schemas.decisions import Decision
from schemas.errors import SchemaError
from schemas.jobs import JobEvent


class StatusTable:
    """The latest `jobs.status` value per job, newest offset wins (tail and own writes)."""

    def __init__(self) -> None:
        self._latest: dict[str, tuple[tuple[int, int], JobStatus]] = {}

    def apply_record(self, rec: InRecord) -> None:
        if rec.value is not None:
            self.apply(JobStatus.from_dict(loads(rec.value)), rec.partition, rec.offset)

    def apply(self, status: JobStatus, partition: int, offset: int) -> None:
        known = self._latest.get(status.job_id)
        if known is None or known[0][0] != partition or offset > known[0][1]:
            self._latest[status.job_id] = ((partition, offset), status)

    def get(self, job_id: str) -> JobStatus | None:
        known = self._latest.get(job_id)
        return None if known is None else known[1]

    def __len__(self) -> int:
        return len(self._latest)


class JobStatusProcessor:
    def __init__(
        self,
        names: TopicNames,
        table: StatusTable,
        metrics: JobStatusMetrics,
        *,
        history_max: int = 50,
        sync: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self.names, self.table, self.metrics = names, table, metrics
        self.history_max, self._sync = history_max, sync
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

    def handle(self, rec: InRecord) -> list[Output]:
        value = rec.json()
        if rec.topic == self.names.jobs_events:
            event = JobEvent.from_dict(value)
            return self._update(event.job_id, step_for_event(event), event.type)
        if rec.topic == self.names.failover_decisions:
            d = Decision.from_dict(value)
            return self._update(d.job_id, step_for_decision(d), "decision")
        raise SchemaError("topic", f"not an input of the job status service: {rec.topic!r}")

    def _update(self, job_id: str, step: Step | None, event: str) -> list[Output]:
        current = self._staged.get(job_id) or self.table.get(job_id)
        new = None if step is None else advance(current, job_id, step, self.history_max)
        if new is None:
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
