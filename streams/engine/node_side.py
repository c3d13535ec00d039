"""The evidence half of the join: everything keyed by node, for one partition.

It stores coalesced signals per node, asks for quarantine on hardware and precursor signals,
answers a job's termination with the evidence in its window, forwards late evidence inside the
grace, and tells the job side when its window is closed on this partition's event time.
"""

from __future__ import annotations

import enum
import heapq
from collections import Counter
from collections.abc import MutableMapping
from dataclasses import dataclass, field
from typing import Any

from schemas.decisions import Evidence, EvidenceClass
from schemas.engine import NodeReport, NodeTermination, QuarantineRequest
from schemas.health import GpuHealth
from schemas.xid import GpuXid
from streams.engine import evidence as ev
from streams.engine import liveness
from streams.policy import Policy

NodeOutput = NodeReport | QuarantineRequest


class Now(enum.Enum):
    NOW = "now"  # `NodeSide.on_evidence`: the watermark as it is


NOW = Now.NOW
MAX_RELEASES = 8  # release times kept per node
REPERSIST_REPEATS_MS = 5_000  # a coalesced repeat is written back after this much event time


def _minor_repeat(before: Evidence, merged: Evidence) -> bool:
    """Only the count changed, and the last occurrence moved less than REPERSIST_REPEATS_MS."""
    last_before = before.ts_ms if before.last_ts_ms is None else before.last_ts_ms
    last_now = merged.ts_ms if merged.last_ts_ms is None else merged.last_ts_ms
    return merged.ts_ms == before.ts_ms and last_now - last_before < REPERSIST_REPEATS_MS


@dataclass(slots=True)
class PendingRef:
    job_id: str
    attempt: int
    terminated_ts_ms: int


@dataclass(slots=True)
class NodeState:
    evidence: list[Evidence] = field(default_factory=list)
    quarantined: bool = False
    pending: list[PendingRef] = field(default_factory=list)
    # Times the node was released from quarantine (repaired), newest last, bounded: evidence
    # from before a release does not count against a job that ended after it.
    releases: list[int] = field(default_factory=list)
    # Spans of the agent's heartbeats ([first, last] ts_ms, `streams.engine.liveness`).
    alive: list[liveness.Run] = field(default_factory=list)

    def window_start(self, terminated_ts_ms: int, lookback_ms: int) -> int:
        start = terminated_ts_ms - lookback_ms
        for released in self.releases:
            if start <= released < terminated_ts_ms:
                start = released + 1
        return start

    def is_empty(self) -> bool:
        return not (
            self.evidence or self.quarantined or self.pending or self.releases or self.alive
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "evidence": [e.to_dict() for e in self.evidence],
            "quarantined": self.quarantined,
            "pending": [[p.job_id, p.attempt, p.terminated_ts_ms] for p in self.pending],
            "releases": self.releases,
            "alive": self.alive,
        }

    @staticmethod
    def from_dict(d: dict[str, Any]) -> NodeState:
        return NodeState(
            evidence=[Evidence.from_dict(e) for e in d["evidence"]],
            quarantined=d["quarantined"],
            pending=[PendingRef(j, a, t) for j, a, t in d["pending"]],
            releases=list(d.get("releases", [])),
            alive=[(first, last) for first, last in d.get("alive", [])],
        )


@dataclass(slots=True)
class PartitionClock:
    """Event time of one partition: its watermark and the windows waiting for it to pass."""

    watermark: int | None = None
    # (wake_at_ms, node, job_id, attempt): the node reports on the job when the watermark
    # passes wake_at_ms (the termination time, a requested time, the end of the grace).
    closing: list[tuple[int, str, str, int]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"watermark": self.watermark, "closing": [list(c) for c in self.closing]}

    @staticmethod
    def from_dict(d: dict[str, Any]) -> PartitionClock:
        closing = [(c[0], c[1], c[2], c[3]) for c in d["closing"]]
        heapq.heapify(closing)
        return PartitionClock(watermark=d["watermark"], closing=closing)


def _pending_ref(state: NodeState, job_id: str, attempt: int) -> PendingRef | None:
    for ref in state.pending:
        if ref.job_id == job_id and ref.attempt == attempt:
            return ref
    return None


class SignalClassifier:
    """An XID or health record as evidence, classified by the policy; None when ignored."""

    def __init__(self, policy: Policy) -> None:
        self.unknown_xids = 0  # XID codes the policy has no row for (counted, never hardware)
        self._xid_class = dict(policy.xid_class)
        self._condition_class = dict(policy.condition_class)

    def __call__(self, rec: GpuXid | GpuHealth) -> Evidence | None:
        if isinstance(rec, GpuXid):
            cls = self.xid_class(rec.xid)
            if cls is None:
                return None
            return Evidence(rec.node, rec.gpu_index, "xid", rec.xid, rec.ts_ms, cls, rec.count)
        cls = self.condition_class(rec.condition)
        if cls is None:
            return None
        return Evidence(rec.node, rec.gpu_index, "health", rec.condition, rec.ts_ms, cls)

    def xid_class(self, code: int) -> EvidenceClass | None:
        """The evidence class of an XID code; None when ignored or unknown (counted)."""
        cls = self._xid_class.get(code)
        if cls is None:
            self.unknown_xids += 1  # never hardware: the policy has no row for it
            return None
        return None if cls == "ignore" else cls

    def condition_class(self, condition: str) -> EvidenceClass | None:
        cls = self._condition_class.get(condition, "ignore")
        return None if cls == "ignore" else cls


class NodeSide:
    def __init__(
        self,
        policy: Policy,
        nodes: MutableMapping[str, NodeState],
        clock: PartitionClock,
        *,
        follow_records: bool = True,
    ) -> None:
        # follow_records: each record moves the watermark to its ts_ms (replay). The stream
        # glue turns it off and calls `advance` itself with a watermark that also waits for
        # lagging input topics.
        self.follow_records = follow_records
        self.policy = policy
        self.nodes = nodes
        self.clock = clock
        self.evidence_of = SignalClassifier(policy)
        # Nodes with a wake-up in the clock: every node with a pending termination is one.
        self._waiting = Counter(c[1] for c in clock.closing)

    def waits_on(self, node: str) -> bool:
        """Does a termination on `node` still wait for evidence (a wake-up is pending)?"""
        return node in self._waiting

    @property
    def unknown_xids(self) -> int:
        return self.evidence_of.unknown_xids

    # -- inputs ---------------------------------------------------------------------------
    def on_signal(self, rec: GpuXid | GpuHealth) -> list[NodeOutput]:
        """An XID or health record on the node; then time advances to its `ts_ms`."""
        # Hot path (most records are `ok` health reports): no allocation for ignored records.
        item = self.evidence_of(rec)
        if item is not None:
            wm = self.clock.watermark
            out = self._heard(item, wm) if item.cls == "liveness" else self._store(item, wm)
            out.extend(self._follow(rec.ts_ms))
            return out
        wm = self.clock.watermark
        if wm is not None and rec.ts_ms <= wm:
            return []
        return self._follow(rec.ts_ms)

    def on_evidence(self, item: Evidence, read_at: int | Now | None = NOW) -> list[NodeOutput]:
        """Evidence already classified (and possibly folded) by the signal filter: stored as
        `on_signal` stores it; time moves only on the filter's watermark records.
        `read_at`: the watermark when the item was read, for evidence applied later
        (`streams.deferred`): what it prunes is measured from there, as if applied then."""
        if read_at is NOW:
            read_at = self.clock.watermark
        if item.cls == "liveness":
            return self._heard(item, read_at)
        return self._store(item, read_at)

    def on_termination(self, msg: NodeTermination) -> list[NodeOutput]:
        """Answer a job's termination with this node's evidence in its window.

        The answer says how far this node's evidence is complete (`complete_to`); the node
        reports again when its watermark passes the termination time, a requested time
        (`until_ms`, see `NodeTermination`) and the end of the grace (closed). Terminations
        do not move the watermark: it is the time of the evidence only.
        """
        if msg.until_ms is not None:
            return self._progress_request(msg)
        p = self.policy
        state = self.nodes.get(msg.node) or NodeState()
        start = state.window_start(msg.terminated_ts_ms, p.lookback_ms)
        end = msg.terminated_ts_ms + p.grace_ms
        items = tuple(e for e in state.evidence if ev.in_window(e, start, end))
        wm = self.clock.watermark
        items += self._silence(msg.node, state, msg.terminated_ts_ms, wm)
        closed = wm is not None and wm > end
        if not closed and _pending_ref(state, msg.job_id, msg.attempt) is None:
            state.pending.append(PendingRef(msg.job_id, msg.attempt, msg.terminated_ts_ms))
            if wm is None or wm <= msg.terminated_ts_ms:
                self._wake_at(msg.terminated_ts_ms, msg.node, msg.job_id, msg.attempt)
            self._wake_at(end, msg.node, msg.job_id, msg.attempt)
            self.nodes[msg.node] = state
        report = NodeReport(
            msg.job_id, msg.attempt, msg.node, items, initial=True, closed=closed, complete_to=wm
        )
        return [report]

    def _progress_request(self, msg: NodeTermination) -> list[NodeOutput]:
        assert msg.until_ms is not None
        wm = self.clock.watermark
        state = self.nodes.get(msg.node)
        ref = None if state is None else _pending_ref(state, msg.job_id, msg.attempt)
        if ref is not None and (wm is None or wm <= msg.until_ms):
            self._wake_at(msg.until_ms, msg.node, msg.job_id, msg.attempt)
            return []
        closed = wm is not None and wm > msg.terminated_ts_ms + self.policy.grace_ms
        items = self._silence(msg.node, state, msg.terminated_ts_ms, wm)
        return [NodeReport(msg.job_id, msg.attempt, msg.node, items, False, closed, wm)]

    def _wake_at(self, at_ms: int, node: str, job_id: str, attempt: int) -> None:
        """Report on (job, attempt) from `node` once the watermark passes `at_ms`."""
        heapq.heappush(self.clock.closing, (at_ms, node, job_id, attempt))
        self._waiting[node] += 1

    def on_release(self, node: str, ts_ms: int | None = None) -> None:
        """The node left quarantine (operator or repair) at `ts_ms`: a new fault quarantines it
        again, and what it showed before the release (the repaired fault) is no longer evidence
        against the next job placed on it."""
        state = self.nodes.get(node) or NodeState()
        state.quarantined = False
        if ts_ms is not None and ts_ms not in state.releases:
            # Kept as times, not by deleting evidence: the release arrives on another topic, in
            # no fixed order with the XIDs, and the answer must not depend on that order.
            state.releases = sorted([*state.releases, ts_ms])[-MAX_RELEASES:]
        self._put(node, state)

    def _follow(self, ts_ms: int) -> list[NodeOutput]:
        return self.advance(ts_ms) if self.follow_records else []

    def advance(self, ts_ms: int) -> list[NodeOutput]:
        """Move the watermark to `ts_ms` if later; report to the pending jobs whose wake-up
        times it passes (and close the windows whose grace it passes)."""
        clock = self.clock
        if clock.watermark is not None and ts_ms <= clock.watermark:
            return []
        clock.watermark = ts_ms
        out: list[NodeOutput] = []
        grace = self.policy.grace_ms
        while clock.closing and clock.closing[0][0] < ts_ms:
            _, node, job_id, attempt = heapq.heappop(clock.closing)
            self._waiting[node] -= 1
            if not self._waiting[node]:
                del self._waiting[node]
            state = self.nodes.get(node)
            ref = None if state is None else _pending_ref(state, job_id, attempt)
            if state is None or ref is None:
                continue  # closed already (an earlier wake-up of the same window)
            closed = ts_ms > ref.terminated_ts_ms + grace
            if closed:
                state.pending.remove(ref)
                self._put(node, state)
            items = self._silence(node, state, ref.terminated_ts_ms, ts_ms)
            out.append(NodeReport(job_id, attempt, node, items, False, closed, ts_ms))
        return out

    def close_all(self) -> list[NodeOutput]:
        """End of input: every open window closes now."""
        if not self.clock.closing:
            return []
        return self.advance(max(c[0] for c in self.clock.closing) + 1)

    # -- internals ------------------------------------------------------------------------
    def _heard(self, item: Evidence, read_at: int | None) -> list[NodeOutput]:
        """A heartbeat (or a fold of them) from the node's agent: it was alive then. Any other
        liveness condition (`nvml_hung`) is also stored as evidence."""
        assert item.node is not None
        state = self.nodes.get(item.node) or NodeState()
        last = item.ts_ms if item.last_ts_ms is None else item.last_ts_ms
        silent_after = self.policy.silent_after_ms
        changed = liveness.heard(state.alive, item.ts_ms, last, silent_after)
        if read_at is not None:
            horizon = min(read_at, item.ts_ms) - self.policy.retention_ms
            changed = liveness.prune(state.alive, horizon) or changed
        if item.code == "heartbeat":
            if changed:
                self._put(item.node, state)
            return []
        self.nodes[item.node] = state  # _store reads it back
        return self._store(item, read_at)

    def _silence(
        self, node: str, state: NodeState | None, terminated_ts_ms: int, watermark: int | None
    ) -> tuple[Evidence, ...]:
        """`agent_silent` evidence when the node's agent was silent at the termination; only
        once the node's evidence is complete past it (every heartbeat before it is read)."""
        if state is None or watermark is None or watermark <= terminated_ts_ms:
            return ()
        since = liveness.silent_since(state.alive, terminated_ts_ms, self.policy.silent_after_ms)
        if since is None:
            return ()
        return (
            Evidence(node, None, "health", "agent_silent", since, "liveness", 1, terminated_ts_ms),
        )

    def _store(self, item: Evidence, read_at: int | None) -> list[NodeOutput]:
        p = self.policy
        assert item.node is not None
        state = self.nodes.get(item.node) or NodeState()
        kept = len(state.evidence) + len(state.releases)
        if read_at is not None:
            # Relative to this signal's own time too: when the watermark runs far ahead of the
            # job side (a backfill, a lagging job agent), a termination still on its way would
            # otherwise find the node's earlier evidence pruned by a later, unrelated signal.
            horizon = min(read_at, item.ts_ms) - p.retention_ms
            ev.prune(state.evidence, horizon)
            if state.releases and state.releases[0] < horizon:
                state.releases = [r for r in state.releases if r >= horizon]
        pruned = kept != len(state.evidence) + len(state.releases)
        stored, before = ev.add(state.evidence, item, p.coalesce_ms, p.max_evidence_per_node)
        out: list[NodeOutput] = []
        if item.cls in ("hardware", "precursor") and not state.quarantined:
            state.quarantined = True
            # Name the job only when the record is evidence for it (inside its window).
            job = next(
                (
                    ref.job_id
                    for ref in state.pending
                    if ev.in_window(
                        item,
                        state.window_start(ref.terminated_ts_ms, p.lookback_ms),
                        ref.terminated_ts_ms + p.grace_ms,
                    )
                ),
                None,
            )
            out.append(QuarantineRequest(item.node, item.cls, item, job, item.ts_ms))
        for ref in state.pending:
            start = state.window_start(ref.terminated_ts_ms, p.lookback_ms)
            end = ref.terminated_ts_ms + p.grace_ms
            # Forward only what newly falls in the window: a flood of repeats sends nothing.
            if ev.in_window(stored, start, end) and (
                before is None or not ev.in_window(before, start, end)
            ):
                out.append(
                    NodeReport(
                        ref.job_id,
                        ref.attempt,
                        item.node,
                        (stored,),
                        initial=False,
                        closed=False,
                        complete_to=self.clock.watermark,
                    )
                )
        if not out and not pruned and before is not None and _minor_repeat(before, stored):
            # A flood: the repeat only bumps a count seen moments ago. Writing the node's state
            # back for each one would put every repeat on the changelog; the count stays
            # approximate under floods (exact in replay, where the state is not copied).
            return out
        self._put(item.node, state)
        return out

    def _put(self, node: str, state: NodeState) -> None:
        if state.is_empty():
            self.nodes.pop(node, None)
        else:
            self.nodes[node] = state
