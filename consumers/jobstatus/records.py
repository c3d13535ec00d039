"""`jobs.status` (key: job_id, compacted): a job's current status and its recent history."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from schemas import _fields as f
from schemas.errors import SchemaError

# What moved the status; also the order of updates within one attempt.
EVENT_RANK = {
    "submitted": 0,
    "started": 1,
    "terminated": 2,
    "decision": 3,
    "succeeded": 4,
    "cancelled": 4,
}
EVENTS = frozenset(EVENT_RANK)


@dataclass(frozen=True)
class Step:
    status: str
    attempt: int
    ts_ms: int
    event: str
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
            status=f.req_str(d, "status"),
            attempt=f.req_int(d, "attempt", minimum=0),
            ts_ms=f.req_int(d, "ts_ms"),
            event=f.req_enum(d, "event", EVENTS),
            rule=f.opt_str(d, "rule"),
        )


@dataclass(frozen=True)
class JobStatus:
    job_id: str
    history: tuple[Step, ...]  # oldest first, never empty; the last step is the current one

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
        }

    @staticmethod
    def from_dict(value: Any) -> JobStatus:
        d = f.as_object(value)
        f.check_version(d)
        history = d.get("history")
        if not isinstance(history, list) or not history:
            raise SchemaError("history", "expected a non-empty list")
        return JobStatus(job_id=f.req_str(d, "job_id"), history=tuple(map(Step.from_dict, history)))
