"""`nodes.quarantine` (key: node, compacted): the current quarantine state of each node."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from schemas import _fields as f
from schemas.bounds import TS_CEIL_MS
from schemas.decisions import Evidence, evidence_list

STATES = frozenset({"quarantined", "released"})
REASONS = frozenset({"hardware", "precursor", "operator"})


@dataclass(frozen=True, slots=True)
class QuarantineRecord:
    node: str
    state: str
    reason: str
    evidence: tuple[Evidence, ...]
    job_id: str | None
    ts_ms: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": f.SCHEMA_VERSION,
            "node": self.node,
            "state": self.state,
            "reason": self.reason,
            "evidence": [e.to_dict() for e in self.evidence],
            "job_id": self.job_id,
            "ts_ms": self.ts_ms,
        }

    @staticmethod
    def from_dict(value: Any) -> QuarantineRecord:
        d = f.as_object(value)
        f.check_version(d)
        ev = evidence_list(d, required=False)
        return QuarantineRecord(
            node=f.req_id(d, "node"),
            state=f.req_enum(d, "state", STATES),
            reason=f.req_enum(d, "reason", REASONS),
            evidence=tuple(Evidence.from_dict(e) for e in ev),
            job_id=f.opt_id(d, "job_id"),
            ts_ms=f.req_int(d, "ts_ms", maximum=TS_CEIL_MS),  # floor: schemas.event_time
        )
