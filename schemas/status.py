"""`jobs.status` (key: job_id, compacted): a job's current status, its recent history, and
the terminations still awaiting a decision (`awaiting_decision`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, get_args

from schemas import _fields as f
from schemas.errors import SchemaError

# A job's status (consumers/jobstatus/flow.py says which input moves it to which).
StatusName = Literal[
    "Submitted",
    "Pending-imagepullbackoff",
    "Running",
    "Pending-failoverinprogress",
    "Pending-internalerror",
    "Pending-maxretriesexceeded",
    "Failed",
    "Succeeded",
    "Cancelled",
]
STATUS_NAMES: frozenset[StatusName] = frozenset(get_args(StatusName))
# What moved the status: a job event's type, or the decision.
StatusEvent = Literal[
    "submitted", "pending", "started", "terminated", "decision", "succeeded", "cancelled"
]
# The order of updates within one attempt.
EVENT_RANK: dict[StatusEvent, int] = {
    "submitted": 0,
    "pending": 1,
    "started": 2,
    "terminated": 3,
    "decision": 4,
    "succeeded": 5,
    "cancelled": 5,
}
EVENTS: frozenset[StatusEvent] = frozenset(EVENT_RANK)


@dataclass(frozen=True)
class Step:
    status: StatusName
    attempt: int
    ts_ms: int
    event: StatusEvent
    rule: str | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "status": self.status,
            "attempt": self.attempt,
            "ts_ms": self.ts_ms,
            "event": self.event,
        }
        if self.rule is not None:
            out["rule"] = self.rule
        return out

    @staticmethod
    def from_dict(value: Any) -> Step:
        d = f.as_object(value)
        return Step(
            status=f.req_enum(d, "status", STATUS_NAMES),
            attempt=f.req_int(d, "attempt", minimum=0),
            ts_ms=f.req_int(d, "ts_ms"),
            event=f.req_enum(d, "event", EVENTS),
            rule=f.opt_str(d, "rule"),
        )


@dataclass(frozen=True)
class Awaiting:
    """A termination read by the job status service and not decided yet.

    Persisted in the job's status record, so the decision deadline survives a restart and
    fires once: `overdue_ms` is set in the same transaction as the `decision_overdue` alert."""

    attempt: int
    terminated_ts_ms: int  # event time of the termination
    read_ms: int  # wall clock when the service first read it: the deadline counts from here
    overdue_ms: int | None = None  # wall clock when it was declared overdue

    def to_dict(self) -> dict[str, Any]:
        return {
            "attempt": self.attempt,
            "terminated_ts_ms": self.terminated_ts_ms,
            "read_ms": self.read_ms,
            "overdue_ms": self.overdue_ms,
        }

    @staticmethod
    def from_dict(value: Any) -> Awaiting:
        d = f.as_object(value)
        return Awaiting(
            attempt=f.req_int(d, "attempt", minimum=0),
            terminated_ts_ms=f.req_int(d, "terminated_ts_ms"),
            read_ms=f.req_int(d, "read_ms"),
            overdue_ms=f.opt_int(d, "overdue_ms"),
        )


@dataclass(frozen=True)
class JobStatus:
    job_id: str
    history: tuple[Step, ...]  # oldest first, never empty; the last step is the current one
    awaiting: tuple[Awaiting, ...] = ()  # terminations with no decision yet, by attempt

    @property
    def current(self) -> Step:
        return self.history[-1]

    def to_dict(self) -> dict[str, Any]:
        now = self.current
        return {
            "schema_version": f.SCHEMA_VERSION,
            "job_id": self.job_id,
            "attempt": now.attempt,
            "status": now.status,
            "event": now.event,
            "rule": now.rule,
            "ts_ms": now.ts_ms,
            "history": [s.to_dict() for s in self.history],
            "awaiting_decision": [a.to_dict() for a in self.awaiting],
        }

    @staticmethod
    def from_dict(value: Any) -> JobStatus:
        d = f.as_object(value)
        f.check_version(d)
        history = d.get("history")
        if not isinstance(history, list) or not history:
            raise SchemaError("history", "expected a non-empty list")
        awaiting = d.get("awaiting_decision") or []  # absent in records written before it
        if not isinstance(awaiting, list):
            raise SchemaError("awaiting_decision", "expected a list")
        return JobStatus(
            job_id=f.req_str(d, "job_id"),
            history=tuple(map(Step.from_dict, history)),
            awaiting=tuple(map(Awaiting.from_dict, awaiting)),
        )
