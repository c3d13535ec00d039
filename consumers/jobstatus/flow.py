"""The status flows of the mission, as a pure function of (current status, update).

| input                                   | status                                |
|-----------------------------------------|---------------------------------------|
| `submitted`                             | Submitted                             |
| `pending`, reason an image pull failure | Pending-imagepullbackoff              |
| `started` (attempt n)                   | Running                               |
| `terminated`, failover on, on-demand    | Pending-failoverinprogress (deciding) |
| `terminated`, failover off or spot      | unchanged: the decision says Failed   |
| decision                                | the decision's status (below)         |
| `started` (attempt n+1)                 | Running                               |
| `succeeded` / `cancelled`               | Succeeded / Cancelled                 |

A decision's status is one of Pending-failoverinprogress, Pending-internalerror,
Pending-maxretriesexceeded and Failed.

Steps are kept in (attempt, event) order, events ranked submitted < pending < started <
terminated < decision < succeeded, cancelled; the current status is the last step. Inputs
arrive on two topics in no guaranteed order, so a step that arrives late is inserted where it
belongs (the current status stays), and a step already there changes nothing: redelivered and
stale inputs publish nothing. Adjacent steps with the same status and attempt merge (a decision
confirming the `Pending-failoverinprogress` that `terminated` set keeps the earlier time, adds
its rule).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Final

from schemas.decisions import Decision
from schemas.jobs import EventType, JobEvent
from schemas.status import EVENT_RANK, JobStatus, StatusName, Step

DECIDING: Final = "Pending-failoverinprogress"
IMAGE_PULL: Final = "Pending-imagepullbackoff"
IMAGE_PULL_REASONS = frozenset({"ImagePullBackOff", "ErrImagePull", "InvalidImageName"})
EVENT_STATUS: dict[EventType, StatusName] = {
    "submitted": "Submitted",
    "started": "Running",
    "succeeded": "Succeeded",
    "cancelled": "Cancelled",
}


def step_for_event(event: JobEvent) -> Step | None:
    if event.type == "terminated":
        if not event.failover or event.training_type == "spot":
            return None  # no failover to wait for: Running -> Failed on the decision
        return Step(DECIDING, event.attempt, event.ts_ms, "terminated")
    if event.type == "pending":
        if event.reason not in IMAGE_PULL_REASONS:
            return None  # no status of the mission says more than the one it has
        return Step(IMAGE_PULL, event.attempt, event.ts_ms, "pending")
    return Step(EVENT_STATUS[event.type], event.attempt, event.ts_ms, event.type)


def step_for_decision(d: Decision) -> Step:
    return Step(d.status, d.attempt, d.decided_ts_ms, "decision", d.rule)


def _order(step: Step) -> tuple[int, int]:
    return (step.attempt, EVENT_RANK[step.event])


def _merge(steps: list[Step]) -> list[Step]:
    out: list[Step] = []
    for step in steps:
        prev = out[-1] if out else None
        if prev is not None and (prev.status, prev.attempt) == (step.status, step.attempt):
            ts = min(prev.ts_ms, step.ts_ms)
            out[-1] = replace(step, ts_ms=ts, rule=step.rule or prev.rule)
        else:
            out.append(step)
    return out


def advance(
    current: JobStatus | None, job_id: str, step: Step, history_max: int
) -> JobStatus | None:
    """The job's status with `step` in its history, or None when `step` changes nothing."""
    if current is None:
        return JobStatus(job_id, (step,))
    history = list(current.history)
    if any((s.attempt, s.event) == (step.attempt, step.event) for s in history):
        return None
    at = sum(1 for s in history if _order(s) <= _order(step))
    history.insert(at, step)
    new = JobStatus(job_id, tuple(_merge(history)[-history_max:]), current.awaiting)
    return None if new == current else new
