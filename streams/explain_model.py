"""The records `streams/explain.py` reads and the explanation it returns (plain, frozen)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from schemas.decisions import Decision


@dataclass(frozen=True, slots=True)
class SourceRecord:
    """One record as read: its logical topic, key, parsed JSON value, and where it was read."""

    topic: str
    key: str | None
    value: Any
    where: str | None = None


@dataclass(frozen=True, slots=True)
class Signal:
    """XIDs or health conditions of one kind on one GPU, grouped, with why they (did not)
    count: `why` is None for evidence the decision counted."""

    node: str | None
    gpu_index: int | None
    kind: str  # "xid" | "health" | "reason"
    code: int | str
    cls: str  # the policy's class; "unknown" for an XID code the policy has no row for
    first_ts_ms: int
    last_ts_ms: int
    count: int
    why: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "node": self.node,
            "gpu_index": self.gpu_index,
            "kind": self.kind,
            "code": self.code,
            "class": self.cls,
            "first_ts_ms": self.first_ts_ms,
            "last_ts_ms": self.last_ts_ms,
            "count": self.count,
            "why": self.why,
        }


@dataclass(frozen=True, slots=True)
class Event:
    """One line of the timeline: what happened at `ts_ms`, on which node, for which attempt."""

    ts_ms: int
    what: str  # job | signal | decision | quarantine | quarantine-request | requeue | alert
    attempt: int | None
    node: str | None
    text: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "ts_ms": self.ts_ms,
            "what": self.what,
            "attempt": self.attempt,
            "node": self.node,
            "text": self.text,
        }


@dataclass(frozen=True, slots=True)
class Attempt:
    attempt: int
    nodes: tuple[str, ...]
    started_ts_ms: int | None
    terminated_ts_ms: int | None
    reason: str | None
    exit_code: int | None
    decision: Decision | None
    window: tuple[int, int] | None  # [T - lookback, T + grace] when it terminated
    counted: tuple[Signal, ...]
    not_counted: tuple[Signal, ...]
    # Evidence the decision counted in a class the policy given to explain does not give it:
    # the classifier ran another policy, so the reasons above may not be its own.
    policy_mismatches: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        d = self.decision
        return {
            "attempt": self.attempt,
            "nodes": list(self.nodes),
            "started_ts_ms": self.started_ts_ms,
            "terminated_ts_ms": self.terminated_ts_ms,
            "reason": self.reason,
            "exit_code": self.exit_code,
            "decision": None
            if d is None
            else {
                "verdict": d.verdict,
                "action": d.action,
                "status": d.status,
                "rule": d.rule,
                "suspect_nodes": list(d.suspect_nodes),
                "next_attempt": d.next_attempt,
                "decided_ts_ms": d.decided_ts_ms,
            },
            "window": None if self.window is None else list(self.window),
            "counted": [s.to_dict() for s in self.counted],
            "not_counted": [s.to_dict() for s in self.not_counted],
            "policy_mismatches": list(self.policy_mismatches),
        }


@dataclass(frozen=True, slots=True)
class Explanation:
    job_id: str
    policy: str
    lookback_ms: int
    grace_ms: int
    attempts: tuple[Attempt, ...]
    timeline: tuple[Event, ...]
    unreadable: tuple[str, ...] = field(default=())  # "where: error" of records skipped

    def to_dict(self) -> dict[str, Any]:
        return {
            "job_id": self.job_id,
            "policy": {
                "source": self.policy,
                "lookback_ms": self.lookback_ms,
                "grace_ms": self.grace_ms,
            },
            "attempts": [a.to_dict() for a in self.attempts],
            "timeline": [e.to_dict() for e in self.timeline],
            "unreadable": list(self.unreadable),
        }
