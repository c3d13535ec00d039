"""The join's verdict: a pure function of one termination and the evidence gathered for it."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any

from schemas.decisions import Action, Decision, DecisionStatus, Evidence, Verdict
from streams.engine.evidence import in_window
from streams.policy import Policy


@dataclass(frozen=True, slots=True)
class Termination:
    """What the job side keeps of a `terminated` event until its decision."""

    job_id: str
    attempt: int
    ts_ms: int
    nodes: tuple[str, ...]
    reason: str | None
    failover: bool
    training_type: str
    max_failovers: int | None

    def to_dict(self) -> dict[str, Any]:
        return {
            "job_id": self.job_id,
            "attempt": self.attempt,
            "ts_ms": self.ts_ms,
            "nodes": list(self.nodes),
            "reason": self.reason,
            "failover": self.failover,
            "training_type": self.training_type,
            "max_failovers": self.max_failovers,
        }

    @staticmethod
    def from_dict(d: dict[str, Any]) -> Termination:
        return Termination(
            d["job_id"],
            d["attempt"],
            d["ts_ms"],
            tuple(d["nodes"]),
            d["reason"],
            d["failover"],
            d["training_type"],
            d["max_failovers"],
        )


def reason_evidence(term: Termination, policy: Policy) -> Evidence | None:
    """The termination's own `reason`, as evidence, when the policy classifies it."""
    cls = policy.classify_reason(term.reason)
    if term.reason is None or cls == "ignore":
        return None
    return Evidence(
        node=None, gpu_index=None, kind="reason", code=term.reason, ts_ms=term.ts_ms, cls=cls
    )


def counted(term: Termination, items: Iterable[Evidence], policy: Policy) -> list[Evidence]:
    """The evidence as the verdict counts it: the silent-node rule (docs/silent-nodes.md)
    makes a liveness condition it names (`agent_silent`, `nvml_hung`) hardware on its node
    when the termination's reason is one it names (the job lost a worker) and the condition
    was seen from `silent_after` before the termination to the end of its grace."""
    out = list(items)
    if term.reason not in policy.silent_reasons:
        return out
    start, end = term.ts_ms - policy.silent_after_ms, term.ts_ms + policy.grace_ms
    for i, e in enumerate(out):
        if (
            e.cls == "liveness"
            and e.node is not None
            and e.code in policy.silent_conditions
            and in_window(e, start, end)
        ):
            out[i] = replace(e, cls="hardware")
    return out


def decided_ts_ms(term: Termination, items: Iterable[Evidence], policy: Policy) -> int:
    """Event time at which the evidence is conclusive: the termination or the first hardware
    signal after it when there is hardware, else the end of the grace."""
    hardware = (e.ts_ms for e in counted(term, items, policy) if e.cls == "hardware")
    first_hardware = min(hardware, default=None)
    if first_hardware is None:
        return term.ts_ms + policy.grace_ms
    return max(term.ts_ms, first_hardware)


def decide(term: Termination, items: Iterable[Evidence], policy: Policy) -> Decision:
    """Verdict by precedence hardware > software > transient > unknown, then the action."""
    evidence = sorted(counted(term, items, policy), key=Evidence.sort_key)
    hardware = [e for e in evidence if e.cls == "hardware"]
    verdict: Verdict
    if hardware:
        verdict = "hardware"
    elif any(e.cls == "software" for e in evidence):
        verdict = "software"
    elif any(e.cls == "transient" for e in evidence):
        verdict = "transient"
    else:
        verdict = "unknown"
    suspects = tuple(sorted({e.node for e in hardware if e.node is not None}))
    budget = policy.max_failovers if term.max_failovers is None else term.max_failovers

    next_attempt: int | None = None
    action: Action
    status: DecisionStatus
    if not term.failover or term.training_type == "spot":
        action, status = "fail", "Failed"
        rule = f"{verdict}.{'spot_job' if term.failover else 'failover_disabled'}"
    elif verdict in ("hardware", "transient"):
        if term.attempt < budget:
            action = "failover" if verdict == "hardware" else "retry"
            status, next_attempt = "Pending-failoverinprogress", term.attempt + 1
            rule = f"{verdict}.{action}"
        else:
            action, status = "give_up", "Pending-maxretriesexceeded"
            rule = f"{verdict}.budget_spent"
    else:
        action, status = "reject", "Pending-internalerror"
        rule = f"{verdict}.reject"

    # Event time at which the evidence became conclusive: deterministic, so replay and the
    # partitioned stream agree on it whatever the interleaving.
    decided = decided_ts_ms(term, hardware, policy)
    return Decision(
        job_id=term.job_id,
        attempt=term.attempt,
        verdict=verdict,
        action=action,
        status=status,
        suspect_nodes=suspects,
        next_attempt=next_attempt,
        evidence=tuple(evidence),
        rule=rule,
        terminated_ts_ms=term.ts_ms,
        decided_ts_ms=decided,
    )
