"""`jobs.requeue` (key: job_id): put a failed job back in the queue, away from suspect nodes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from schemas import _fields as f
from schemas.decisions import ACTIONS, VERDICTS, Action, Verdict


@dataclass(frozen=True)
class RequeueCommand:
    job_id: str
    attempt: int  # the attempt that failed
    next_attempt: int
    spec: dict[str, Any] | None  # the job's latest spec from jobs.events; None if never seen
    exclude_nodes: tuple[str, ...]  # suspects + every node quarantined when decided
    priority: int  # the job's own priority + the boost for its action
    reason: str  # the decision's rule, e.g. "hardware.failover"
    verdict: Verdict
    action: Action
    decided_ts_ms: int
    ts_ms: int  # wall clock when the command was issued
    checkpoint: dict[str, Any] | None = None  # the job's last checkpoint (from its telemetry)

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": f.SCHEMA_VERSION,
            "job_id": self.job_id,
            "attempt": self.attempt,
            "next_attempt": self.next_attempt,
            "spec": self.spec,
            "exclude_nodes": list(self.exclude_nodes),
            "priority": self.priority,
            "reason": self.reason,
            "verdict": self.verdict,
            "action": self.action,
            "decided_ts_ms": self.decided_ts_ms,
            "checkpoint": self.checkpoint,
            "ts_ms": self.ts_ms,
        }

    @staticmethod
    def from_dict(value: Any) -> RequeueCommand:
        d = f.as_object(value)
        f.check_version(d)
        return RequeueCommand(
            job_id=f.req_str(d, "job_id"),
            attempt=f.req_int(d, "attempt", minimum=0),
            next_attempt=f.req_int(d, "next_attempt", minimum=0),
            spec=f.opt_object(d, "spec"),
            exclude_nodes=f.str_list(d, "exclude_nodes", required=True),
            priority=f.req_int(d, "priority"),
            reason=f.req_str(d, "reason"),
            verdict=f.req_enum(d, "verdict", VERDICTS),
            action=f.req_enum(d, "action", ACTIONS),
            decided_ts_ms=f.req_int(d, "decided_ts_ms"),
            ts_ms=f.req_int(d, "ts_ms"),
            checkpoint=f.opt_object(d, "checkpoint"),
        )
