"""The decision deadline, as pure functions of a job's status and the wall clock.

Every termination the service reads starts waiting for its decision; if none has arrived
`deadline_ms` of wall clock after it was read, the attempt is overdue: one `decision_overdue`
alert on `failover.alerts` (the shape of the classifier's job alerts) and the status record
says so. No verdict is made up: the job keeps its status until the classifier decides. This
lives in the job status service, not the classifier, because it must fire when the classifier
is down. A decision clears the wait (overdue or not), so the alert fires at most once per
(job, attempt).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Final

from schemas.alerts import JobAlert
from schemas.status import Awaiting, JobStatus

KIND_OVERDUE: Final = "decision_overdue"


def decided(status: JobStatus | None, attempt: int) -> bool:
    """Whether the history already holds this attempt's decision (decisions may come first)."""
    return status is not None and any(
        s.event == "decision" and s.attempt == attempt for s in status.history
    )


def on_termination(
    status: JobStatus | None, attempt: int, terminated_ts_ms: int, read_ms: int
) -> tuple[Awaiting, ...]:
    """The awaited decisions once this termination is read (unchanged when it is known)."""
    awaiting = () if status is None else status.awaiting
    if decided(status, attempt) or any(a.attempt == attempt for a in awaiting):
        return awaiting
    new = Awaiting(attempt, terminated_ts_ms, read_ms)
    return tuple(sorted((*awaiting, new), key=lambda a: a.attempt))


def on_decision(awaiting: tuple[Awaiting, ...], attempt: int) -> tuple[Awaiting, ...]:
    """A decision for `attempt` ends its wait, and any older attempt's (it moved on)."""
    return tuple(a for a in awaiting if a.attempt > attempt)


def newly_overdue(awaiting: tuple[Awaiting, ...], now_ms: int, deadline_ms: int) -> list[Awaiting]:
    return [a for a in awaiting if a.overdue_ms is None and now_ms - a.read_ms >= deadline_ms]


def mark_overdue(status: JobStatus, late: list[Awaiting], now_ms: int) -> JobStatus:
    attempts = {a.attempt for a in late}
    return replace(
        status,
        awaiting=tuple(
            replace(a, overdue_ms=now_ms) if a.attempt in attempts else a for a in status.awaiting
        ),
    )


def next_due_ms(awaiting: tuple[Awaiting, ...], deadline_ms: int) -> int | None:
    """When the earliest wait not yet overdue runs out, or None."""
    return min((a.read_ms + deadline_ms for a in awaiting if a.overdue_ms is None), default=None)


def overdue_count(status: JobStatus) -> int:
    return sum(1 for a in status.awaiting if a.overdue_ms is not None)


def overdue_alert(job_id: str, late: Awaiting, deadline_ms: int, now_ms: int) -> JobAlert:
    return JobAlert(
        kind=KIND_OVERDUE,
        job_id=job_id,
        attempt=late.attempt,
        ts_ms=now_ms,
        detail={
            "terminated_ts_ms": late.terminated_ts_ms,
            "read_ms": late.read_ms,
            "deadline_s": deadline_ms / 1000,
            "waited_s": (now_ms - late.read_ms) / 1000,
            "message": "no failover decision yet: is the classifier down or lagging?",
        },
    )
