"""What the requeue service remembers, each rebuilt by reading a topic from its beginning.

- `JobSpecs` from `jobs.events`: each live job's latest `spec` and `priority`.
- `Requeued` from `jobs.requeue` (its own output): the highest attempt requeued per job, the
  durable guard against a second command for the same (job_id, attempt).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from consumers.runtime.records import InRecord
from schemas.codec import loads
from schemas.jobs import JobEvent
from schemas.requeue import RequeueCommand

FINISHED = frozenset({"succeeded", "cancelled"})


@dataclass(frozen=True)
class JobInfo:
    spec: dict[str, Any] | None = None
    priority: int | None = None


class JobSpecs:
    def __init__(self) -> None:
        self.jobs: dict[str, JobInfo] = {}

    def apply_record(self, rec: InRecord) -> None:
        if rec.value is not None:
            self.apply(JobEvent.from_dict(loads(rec.value)))

    def apply(self, event: JobEvent) -> None:
        if event.type in FINISHED:
            self.jobs.pop(event.job_id, None)  # nothing will requeue it: keep memory bounded
            return
        known = self.jobs.get(event.job_id, JobInfo())
        self.jobs[event.job_id] = JobInfo(
            spec=known.spec if event.spec is None else event.spec,
            priority=known.priority if event.priority is None else event.priority,
        )

    def get(self, job_id: str) -> JobInfo | None:
        return self.jobs.get(job_id)


class Requeued:
    def __init__(self) -> None:
        self.attempts: dict[str, int] = {}

    def apply_record(self, rec: InRecord) -> None:
        if rec.value is not None:
            command = RequeueCommand.from_dict(loads(rec.value))
            self.add(command.job_id, command.attempt)

    def add(self, job_id: str, attempt: int) -> None:
        self.attempts[job_id] = max(attempt, self.attempts.get(job_id, -1))

    def done(self, job_id: str, attempt: int) -> bool:
        """A command for this attempt (or a later one) of the job was already published."""
        return self.attempts.get(job_id, -1) >= attempt
