"""Messages between the two halves of the engine, and what the engine emits.

The engine is split the way Kafka partitions it: the *node side* owns evidence (keyed by node),
the *job side* owns terminations (keyed by job). They meet only through these messages, which the
Kafka glue carries on internal topics and replay carries on an in-process queue.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from schemas.decisions import Evidence


@dataclass(frozen=True, slots=True)
class NodeTermination:
    """Job side -> node side: job (job_id, attempt) ended at `terminated_ts_ms` on `node`."""

    job_id: str
    attempt: int
    node: str
    terminated_ts_ms: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "job_id": self.job_id,
            "attempt": self.attempt,
            "node": self.node,
            "terminated_ts_ms": self.terminated_ts_ms,
        }

    @staticmethod
    def from_dict(d: dict[str, Any]) -> NodeTermination:
        return NodeTermination(d["job_id"], d["attempt"], d["node"], d["terminated_ts_ms"])


@dataclass(frozen=True, slots=True)
class NodeReport:
    """Node side -> job side: evidence from `node` inside the job's window.

    `initial` marks the answer to the NodeTermination; `closed` says the node's watermark passed
    the end of the grace, so nothing more will come from this node for this (job, attempt).
    """

    job_id: str
    attempt: int
    node: str
    items: tuple[Evidence, ...]
    initial: bool
    closed: bool

    def to_dict(self) -> dict[str, Any]:
        return {
            "job_id": self.job_id,
            "attempt": self.attempt,
            "node": self.node,
            "items": [e.to_dict() for e in self.items],
            "initial": self.initial,
            "closed": self.closed,
        }

    @staticmethod
    def from_dict(d: dict[str, Any]) -> NodeReport:
        return NodeReport(
            d["job_id"],
            d["attempt"],
            d["node"],
            tuple(Evidence.from_dict(e) for e in d["items"]),
            d["initial"],
            d["closed"],
        )


@dataclass(frozen=True, slots=True)
class QuarantineRequest:
    """Node side -> quarantine: a hardware or precursor signal on a node not yet quarantined."""

    node: str
    reason: str  # "hardware" | "precursor"
    evidence: Evidence
    job_id: str | None
    ts_ms: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": 1,
            "node": self.node,
            "state": "quarantined",
            "reason": self.reason,
            "evidence": [self.evidence.to_dict()],
            "job_id": self.job_id,
            "ts_ms": self.ts_ms,
        }
