"""`failover.decisions` (key: job_id): the verdict on one terminated (job, attempt)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, get_args

from schemas import _fields as f
from schemas import bounds as b
from schemas.errors import SchemaError

# Closed sets as Literals (mypy checks every spelling) whose values stay plain strings on the
# wire and in memory: orjson refuses a str subclass (an enum) as a dict key.
# What killed the job, by precedence hardware > software > transient > unknown.
Verdict = Literal["hardware", "software", "transient", "unknown"]
# failover: quarantine the suspects and requeue elsewhere; retry: requeue (transient);
# reject: no failover (software, unknown); fail: failover off for the job, or a spot job;
# give_up: the failover budget is spent.
Action = Literal["failover", "retry", "reject", "fail", "give_up"]
# The job's status for the scheduler.
DecisionStatus = Literal[
    "Pending-failoverinprogress", "Pending-internalerror", "Pending-maxretriesexceeded", "Failed"
]
EvidenceKind = Literal["xid", "health", "reason"]  # reason: the termination's own
# precursor: quarantines a node, decides nothing; liveness: heartbeats and the silent-node
# conditions (docs/silent-nodes.md)
EvidenceClass = Literal["hardware", "software", "transient", "precursor", "ignore", "liveness"]

VERDICTS: frozenset[Verdict] = frozenset(get_args(Verdict))
ACTIONS: frozenset[Action] = frozenset(get_args(Action))
STATUSES: frozenset[DecisionStatus] = frozenset(get_args(DecisionStatus))
EVIDENCE_KINDS: frozenset[EvidenceKind] = frozenset(get_args(EvidenceKind))
EVIDENCE_CLASSES: frozenset[EvidenceClass] = frozenset(get_args(EvidenceClass))


@dataclass(frozen=True, slots=True)
class Evidence:
    """One (coalesced) signal: `count` repeats from `ts_ms` to `last_ts_ms`."""

    node: str | None
    gpu_index: int | None
    kind: EvidenceKind
    code: int | str
    ts_ms: int
    cls: EvidenceClass
    count: int = 1
    last_ts_ms: int | None = None

    def sort_key(self) -> tuple[int, str, int, str, str]:
        return (
            self.ts_ms,
            self.node or "",
            -1 if self.gpu_index is None else self.gpu_index,
            self.kind,
            str(self.code),
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "node": self.node,
            "gpu_index": self.gpu_index,
            "kind": self.kind,
            "code": self.code,
            "ts_ms": self.ts_ms,
            "class": self.cls,
            "count": self.count,
            "last_ts_ms": self.ts_ms if self.last_ts_ms is None else self.last_ts_ms,
        }

    @staticmethod
    def from_dict(value: Any) -> Evidence:
        d = f.as_object(value)
        code = d.get("code")
        if not isinstance(code, int | str) or isinstance(code, bool):
            raise SchemaError("code", "expected an integer or a string")
        if isinstance(code, str) and len(code) > b.SHORT_MAX_CHARS:
            raise SchemaError("code", f"longer than {b.SHORT_MAX_CHARS} characters")
        if isinstance(code, int):
            f.check_int("code", code, 0, b.XID_MAX)
        return Evidence(
            node=f.opt_id(d, "node"),
            gpu_index=f.opt_int(d, "gpu_index", minimum=0, maximum=b.GPU_INDEX_MAX),
            kind=f.req_enum(d, "kind", EVIDENCE_KINDS),
            code=code,
            ts_ms=f.req_int(d, "ts_ms"),
            cls=f.req_enum(d, "class", EVIDENCE_CLASSES),
            count=f.opt_int(d, "count", minimum=1) or 1,
            last_ts_ms=f.opt_int(d, "last_ts_ms"),
        )


def evidence_list(d: Any, *, required: bool) -> list[Any]:
    """The raw `evidence` list of a decision or quarantine record, capped like a node list."""
    ev = d.get("evidence")
    if ev is None and not required:
        return []
    if not isinstance(ev, list):
        raise SchemaError("evidence", "expected a list")
    if len(ev) > b.MAX_JOB_NODES:
        raise SchemaError("evidence", f"{len(ev)} items, more than the cap of {b.MAX_JOB_NODES}")
    return ev


@dataclass(frozen=True, slots=True)
class Decision:
    job_id: str
    attempt: int
    verdict: Verdict
    action: Action
    status: DecisionStatus
    suspect_nodes: tuple[str, ...]
    next_attempt: int | None
    evidence: tuple[Evidence, ...]
    rule: str
    terminated_ts_ms: int
    decided_ts_ms: int
    # The job's last checkpoint from its training telemetry ({step, uri, ts_ms, attempt}), so a
    # requeue resumes from it; None when the job reported none.
    checkpoint: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": f.SCHEMA_VERSION,
            "job_id": self.job_id,
            "attempt": self.attempt,
            "verdict": self.verdict,
            "action": self.action,
            "status": self.status,
            "suspect_nodes": list(self.suspect_nodes),
            "next_attempt": self.next_attempt,
            "evidence": [e.to_dict() for e in self.evidence],
            "rule": self.rule,
            "terminated_ts_ms": self.terminated_ts_ms,
            "decided_ts_ms": self.decided_ts_ms,
            "checkpoint": self.checkpoint,
        }

    @staticmethod
    def from_dict(value: Any) -> Decision:
        d = f.as_object(value)
        f.check_version(d)
        ev = evidence_list(d, required=True)
        next_attempt = d.get("next_attempt")
        if next_attempt is not None:
            next_attempt = f.check_int("next_attempt", next_attempt, 0, b.I32_MAX)
        return Decision(
            job_id=f.req_id(d, "job_id"),
            attempt=f.req_int(d, "attempt", minimum=0, maximum=b.I32_MAX),
            verdict=f.req_enum(d, "verdict", VERDICTS),
            action=f.req_enum(d, "action", ACTIONS),
            status=f.req_enum(d, "status", STATUSES),
            suspect_nodes=f.str_list(d, "suspect_nodes", required=True),
            next_attempt=next_attempt,
            evidence=tuple(Evidence.from_dict(e) for e in ev),
            rule=f.req_str(d, "rule"),
            # Bounded above so arithmetic on them cannot overflow; the floor and the future
            # bound are the consumers' (schemas.event_time): these are our own outputs.
            terminated_ts_ms=f.req_int(d, "terminated_ts_ms", maximum=b.TS_CEIL_MS),
            decided_ts_ms=f.req_int(d, "decided_ts_ms", maximum=b.TS_CEIL_MS),
            checkpoint=f.opt_object(d, "checkpoint"),
        )
