"""The termination half of the join: everything keyed by job.

A `terminated` event opens a pending decision and fans out to its nodes; node reports gather the
evidence; the decision is made as soon as it is certain: hardware evidence once every node has
answered, anything else once every node's window has closed.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import MutableMapping
from dataclasses import dataclass, field, replace
from typing import Any

from schemas.decisions import Decision, Evidence
from schemas.engine import NodeReport, NodeTermination
from schemas.jobs import JobEvent
from streams.engine.decide import Termination, decide, decided_ts_ms, reason_evidence
from streams.engine.progress import ProgressTracker
from streams.policy import Policy

JobOutput = Decision | NodeTermination
# Decided attempts remembered per job to ignore duplicates; older ones are long settled.
DECIDED_MEMORY = 16
CLOSED_LONG_AGO_MS = 10 * 365 * 86_400_000  # a window closed under the old format


@dataclass(slots=True)
class Pending:
    term: Termination
    items: dict[tuple[Any, ...], Evidence] = field(default_factory=dict)
    # Per node that answered: how far its evidence is complete (the watermark it reported;
    # signals with ts_ms below it have all been read). None: answered, watermark unknown.
    complete: dict[str, int | None] = field(default_factory=dict)
    # The time the nodes in `asked` were asked to report past (`NodeTermination.until_ms`).
    requested: int | None = None
    asked: set[str] = field(default_factory=set)
    # Not persisted, derived from the above so that a report costs O(1), not O(nodes): the
    # job's nodes as a set, and the known `complete` values counted (their minimum is how far
    # every node is complete) with the number still unknown (None).
    node_set: frozenset[str] = field(init=False, repr=False, compare=False)
    known: Counter[int] = field(init=False, repr=False, compare=False)
    unknown: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.node_set = frozenset(self.term.nodes)
        self.known = Counter(c for c in self.complete.values() if c is not None)
        self.unknown = len(self.complete) - self.known.total()

    def set_complete(self, node: str, complete: int | None) -> None:
        """Record how far `node`'s evidence is complete (None: it answered, not known how far)."""
        if node in self.complete:
            old = self.complete[node]
            if old is None:
                self.unknown -= 1
            else:
                self.known[old] -= 1
                if not self.known[old]:
                    del self.known[old]
        self.complete[node] = complete
        if complete is None:
            self.unknown += 1
        else:
            self.known[complete] += 1

    def to_dict(self) -> dict[str, Any]:
        return {
            "term": self.term.to_dict(),
            "items": [e.to_dict() for e in self.items.values()],
            "complete": self.complete,
            "requested": self.requested,
            "asked": sorted(self.asked),
        }

    @staticmethod
    def from_dict(d: dict[str, Any]) -> Pending:
        term = Termination.from_dict(d["term"])
        if "complete" in d:
            complete: dict[str, int | None] = dict(d["complete"])
        else:  # written before the completeness rule: answered nodes, closed windows
            complete = {node: None for node in d["answered"]}
            # Nothing more comes from a closed window: complete past any decision time.
            complete.update({node: term.ts_ms + CLOSED_LONG_AGO_MS for node in d["closed"]})
        p = Pending(
            term, complete=complete, requested=d.get("requested"), asked=set(d.get("asked", ()))
        )
        for e in d["items"]:
            item = Evidence.from_dict(e)
            p.items[_item_key(item)] = item
        return p

    def complete_to(self) -> int | None:
        """How far the evidence of every node is complete; None while one has not answered."""
        if len(self.complete) < len(self.node_set) or self.unknown:
            return None
        return min(self.known)


@dataclass(slots=True)
class JobState:
    pending: dict[int, Pending] = field(default_factory=dict)
    decided: list[int] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "pending": {str(a): p.to_dict() for a, p in self.pending.items()},
            "decided": self.decided,
        }

    @staticmethod
    def from_dict(d: dict[str, Any]) -> JobState:
        return JobState(
            {int(a): Pending.from_dict(p) for a, p in d["pending"].items()}, list(d["decided"])
        )


def _item_key(e: Evidence) -> tuple[Any, ...]:
    return (e.node, e.gpu_index, e.kind, e.code, e.ts_ms)


class JobSide:
    def __init__(
        self,
        policy: Policy,
        jobs: MutableMapping[str, JobState],
        progress: ProgressTracker | None = None,
    ) -> None:
        self.policy = policy
        self.jobs = jobs
        self.progress = progress  # training telemetry: Hang evidence and the last checkpoint
        self.duplicates = 0  # terminations of an already pending or decided (job, attempt)
        self.stale_reports = 0  # node reports for a (job, attempt) already decided

    def on_job_event(self, event: JobEvent) -> list[JobOutput]:
        if self.progress is not None:
            self.progress.on_job_event(event)
        if event.type != "terminated":
            return []  # started/succeeded/cancelled/submitted decide nothing
        state = self.jobs.get(event.job_id) or JobState()
        if event.attempt in state.pending or event.attempt in state.decided:
            self.duplicates += 1
            return []
        term = Termination(
            event.job_id,
            event.attempt,
            event.ts_ms,
            tuple(dict.fromkeys(event.nodes)),
            event.reason,
            event.failover,
            event.training_type,
            event.max_failovers,
        )
        pending = Pending(term)
        reason = reason_evidence(term, self.policy)
        if reason is not None:
            pending.items[_item_key(reason)] = reason
        hang = (
            self.progress.hang_evidence(term.job_id, term.attempt, term.ts_ms)
            if (self.progress is not None)
            else None
        )
        if hang is not None:
            pending.items[_item_key(hang)] = hang
        state.pending[event.attempt] = pending
        if not term.nodes:
            return self._finish(state, pending)
        self.jobs[event.job_id] = state
        return [NodeTermination(term.job_id, term.attempt, node, term.ts_ms) for node in term.nodes]

    def on_node_report(self, report: NodeReport) -> list[JobOutput]:
        state = self.jobs.get(report.job_id)
        pending = state.pending.get(report.attempt) if state is not None else None
        if state is None or pending is None or report.node not in pending.node_set:
            self.stale_reports += 1
            return []
        for item in report.items:
            pending.items.setdefault(_item_key(item), item)
        complete = report.complete_to
        if report.closed:
            # Older reports carried no watermark; a closed window is complete past its grace.
            complete = max(complete or 0, pending.term.ts_ms + self.policy.grace_ms + 1)
        known = pending.complete.get(report.node)
        if report.node not in pending.complete or (
            complete is not None and (known is None or complete > known)
        ):
            pending.set_complete(report.node, complete)
        out = self._try_decide(state, pending)
        if report.attempt in state.pending:  # not decided (deciding saves the state itself)
            self.jobs[report.job_id] = state
        return out

    def _try_decide(self, state: JobState, pending: Pending) -> list[JobOutput]:
        """The completeness rule: decide at `decided_ts_ms` once every node's evidence is
        complete past it, from exactly the evidence stamped at or before it."""
        term = pending.term
        complete_to = pending.complete_to()
        decided_at = decided_ts_ms(term, pending.items.values(), self.policy)
        if complete_to is not None and complete_to > decided_at:
            return self._finish(state, pending, decided_at)
        grace_end = term.ts_ms + self.policy.grace_ms
        if not term.ts_ms < decided_at < grace_end:
            return []  # every node reports past the termination and the grace by itself
        # Hardware after the termination moved the decision time: ask the nodes not complete
        # that far to report when they are (else the decision would wait for the grace).
        if pending.requested != decided_at:
            pending.requested, pending.asked = decided_at, set()
        behind = [
            node
            for node, complete in pending.complete.items()
            if (complete is None or complete <= decided_at) and node not in pending.asked
        ]
        pending.asked.update(behind)
        return [
            NodeTermination(term.job_id, term.attempt, node, term.ts_ms, until_ms=decided_at)
            for node in behind
        ]

    def _finish(
        self, state: JobState, pending: Pending, decided_at: int | None = None
    ) -> list[JobOutput]:
        term = pending.term
        del state.pending[term.attempt]
        state.decided = [*state.decided, term.attempt][-DECIDED_MEMORY:]
        self.jobs[term.job_id] = state
        # Evidence stamped after the decision time never enters it, even if it was read
        # already: live, at that time, it would not have been (it still quarantines its node).
        items = [e for e in pending.items.values() if decided_at is None or e.ts_ms <= decided_at]
        started = (
            self.progress.started_at(term.job_id, term.attempt)
            if self.progress is not None
            else None
        )
        if started is not None:
            # A software signal that ended before this attempt started on the node belongs to
            # the node's previous tenant (hard case 2). Hardware signals keep the full lookback:
            # a GPU broken before the job arrived is still broken.
            items = [
                e
                for e in items
                if not (
                    e.cls == "software"
                    and e.node is not None
                    and (e.ts_ms if e.last_ts_ms is None else e.last_ts_ms) < started
                )
            ]
        decision = decide(term, items, self.policy)
        checkpoint = self.progress.checkpoint(term.job_id) if self.progress is not None else None
        if checkpoint is not None:
            decision = replace(decision, checkpoint=checkpoint)
        return [decision]
