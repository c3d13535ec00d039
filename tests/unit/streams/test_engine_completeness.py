"""The completeness rule across partitions: a decision is a function of the input alone.

Nodes live on different partitions whose watermarks move at their own pace (as on Kafka, where
each partition is read by whichever worker owns it). A decision at `decided_ts_ms` waits until
every node of the job is complete past it and uses exactly the evidence stamped at or before it,
so any interleaving of the partitions gives replay's decision.
"""

from __future__ import annotations

import random
from collections import deque
from dataclasses import dataclass, field

import pytest
from failover_harness import GRACE, POLICY, T0, S, health, nodes, terminated, xid

from schemas.decisions import Decision
from schemas.engine import NodeReport, NodeTermination, QuarantineRequest
from schemas.health import GpuHealth
from schemas.jobs import JobEvent
from schemas.xid import GpuXid
from streams.engine.job_side import JobSide, JobState
from streams.engine.local import LocalPipeline
from streams.engine.node_side import NodeSide, NodeState, PartitionClock

A, B, C, D = nodes(4)
T = T0 + 3600 * S


@dataclass
class Partitioned:
    """Node sides per partition (each its own clock), one job side, explicit message queues."""

    partition_of: dict[str, int]
    node_states: dict[str, NodeState] = field(default_factory=dict)
    job_states: dict[str, JobState] = field(default_factory=dict)
    sides: dict[int, NodeSide] = field(default_factory=dict)
    to_nodes: dict[int, deque[NodeTermination]] = field(default_factory=dict)
    to_job: deque[NodeReport] = field(default_factory=deque)
    decisions: list[Decision] = field(default_factory=list)
    quarantined: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.job_side = JobSide(POLICY, self.job_states)
        for p in set(self.partition_of.values()):
            self.sides[p] = NodeSide(POLICY, self.node_states, PartitionClock())
            self.to_nodes[p] = deque()

    def signal(self, rec: GpuXid | GpuHealth) -> None:
        self._node_out(self.sides[self.partition_of[rec.node]].on_signal(rec))

    def job_event(self, event: JobEvent) -> None:
        self._job_out(self.job_side.on_job_event(event))

    def deliver_to_node(self, partition: int) -> None:
        msg = self.to_nodes[partition].popleft()
        self._node_out(self.sides[partition].on_termination(msg))

    def deliver_to_job(self) -> None:
        self._job_out(self.job_side.on_node_report(self.to_job.popleft()))

    def _node_out(self, out: list[NodeReport | QuarantineRequest]) -> None:
        for o in out:
            if isinstance(o, NodeReport):
                self.to_job.append(o)
            else:
                self.quarantined.append(o.node)

    def _job_out(self, out: list[Decision | NodeTermination]) -> None:
        for o in out:
            if isinstance(o, Decision):
                self.decisions.append(o)
            else:
                self.to_nodes[self.partition_of[o.node]].append(o)

    def drain_messages(self) -> None:
        while self.to_job or any(self.to_nodes.values()):
            for p, queue in self.to_nodes.items():
                while queue:
                    self.deliver_to_node(p)
            while self.to_job:
                self.deliver_to_job()


def _key(d: Decision) -> tuple[object, ...]:
    evidence = sorted((e.node or "", str(e.code), e.ts_ms) for e in d.evidence)
    return (d.verdict, d.action, d.suspect_nodes, d.next_attempt, d.rule, d.decided_ts_ms, evidence)


# -- the edges, one by one ------------------------------------------------------------------


def test_hardware_on_one_node_waits_for_a_node_whose_partition_is_behind() -> None:
    e = Partitioned({A: 0, B: 1, C: 1})
    e.signal(xid(A, 79, T - 3 * S))
    e.signal(health(A, "ok", T + 10 * S))  # partition 0 is past T
    e.signal(health(C, "ok", T - 60 * S))  # partition 1 is far behind
    e.job_event(terminated("job-1", [A, B], T))
    e.drain_messages()
    assert e.decisions == []  # B's evidence up to T has not been read yet
    e.signal(health(B, "ecc_uncorrectable", T - 2 * S))
    e.drain_messages()
    assert e.decisions == []
    e.signal(health(C, "ok", T))  # exactly T: a signal stamped T may still come
    e.drain_messages()
    assert e.decisions == []
    e.signal(health(C, "ok", T + 1))
    e.drain_messages()
    (d,) = e.decisions
    assert (d.verdict, d.suspect_nodes, d.decided_ts_ms) == ("hardware", (A, B), T)


def test_hardware_after_the_termination_asks_the_other_partition_to_report_past_it() -> None:
    e = Partitioned({A: 0, B: 1})
    e.job_event(terminated("job-1", [A, B], T))
    e.drain_messages()
    e.signal(xid(A, 79, T + 5 * S))
    e.signal(health(A, "ok", T + 6 * S))
    e.signal(health(B, "ok", T + 2 * S))  # B: past T, not past the hardware's time
    e.drain_messages()
    assert e.decisions == []
    e.signal(health(B, "ok", T + 5 * S + 1))  # well before the end of the grace
    e.drain_messages()
    (d,) = e.decisions
    assert (d.verdict, d.suspect_nodes, d.decided_ts_ms) == ("hardware", (A,), T + 5 * S)


def test_later_hardware_read_early_on_a_partition_ahead_does_not_become_a_suspect() -> None:
    e = Partitioned({A: 0, B: 1})
    e.signal(xid(B, 48, T + 8 * S))  # partition 1 runs ahead: read before A's XID
    e.signal(health(B, "ok", T + 90 * S))
    e.job_event(terminated("job-1", [A, B], T))
    e.drain_messages()
    e.signal(xid(A, 79, T + 5 * S))
    e.signal(health(A, "ok", T + 6 * S))
    e.drain_messages()
    (d,) = e.decisions
    assert (d.suspect_nodes, d.decided_ts_ms) == ((A,), T + 5 * S)
    assert sorted(e.quarantined) == [A, B]  # B's XID still quarantines B


def test_non_hardware_waits_for_every_partition_to_pass_the_grace() -> None:
    e = Partitioned({A: 0, B: 1})
    e.job_event(terminated("job-1", [A, B], T, reason="OOMKilled"))
    e.signal(health(A, "ok", T + GRACE + 1))
    e.drain_messages()
    assert e.decisions == []
    e.signal(health(B, "ok", T + GRACE + 1))
    e.drain_messages()
    (d,) = e.decisions
    assert (d.verdict, d.decided_ts_ms) == ("software", T + GRACE)


def test_a_termination_read_twice_by_a_node_side_reports_once_per_wake_up() -> None:
    e = Partitioned({A: 0})
    e.job_event(terminated("job-1", [A], T, reason="Hang"))
    e.to_nodes[0].append(e.to_nodes[0][0])  # redelivered after a crash
    e.drain_messages()
    e.signal(health(A, "ok", T + GRACE + 1))
    e.drain_messages()
    assert len(e.decisions) == 1
    assert e.node_states == {}  # the window closed: nothing left pending


# -- any interleaving gives replay's decision -----------------------------------------------

SIGNALS = [
    ("xid", 79),
    ("xid", 48),
    ("xid", 13),
    ("xid", 31),
    ("xid", 63),
    ("xid", 45),
    ("health", "ecc_uncorrectable"),
    ("health", "power"),
    ("health", "row_remap_pending"),
    ("health", "ok"),
]


def _workload(rng: random.Random) -> tuple[list[GpuXid | GpuHealth], JobEvent]:
    records: list[GpuXid | GpuHealth] = []
    for node in (A, B, C, D):
        for _ in range(rng.randint(0, 4)):
            kind, code = rng.choice(SIGNALS)
            ts = T + rng.randint(-700, 200) * S + rng.randint(0, 999)
            gpu = rng.randint(0, 1)
            if kind == "xid":
                assert isinstance(code, int)
                records.append(xid(node, code, ts, gpu=gpu))
            else:
                assert isinstance(code, str)
                records.append(health(node, code, ts, gpu=gpu))
    records.sort(key=lambda r: r.ts_ms)
    job_nodes = rng.sample([A, B, C, D], rng.randint(1, 4))
    reason = rng.choice([None, "OOMKilled", "WorkerLost", "NCCLTimeout"])
    return records, terminated("job-1", job_nodes, T, reason=reason)


def _replay(records: list[GpuXid | GpuHealth], term: JobEvent, end: int) -> Decision:
    pipeline = LocalPipeline(POLICY)
    out = []
    fed_term = False
    for rec in records:
        if not fed_term and rec.ts_ms > term.ts_ms:
            out += pipeline.feed(term)
            fed_term = True
        out += pipeline.feed(rec)
    if not fed_term:
        out += pipeline.feed(term)
    out += pipeline.feed(health("end-of-input", "ok", end))
    out += pipeline.finish()
    (d,) = [o for o in out if isinstance(o, Decision)]
    return d


@pytest.mark.parametrize("seed", range(300))
def test_any_interleaving_of_partitions_gives_replays_decision(seed: int) -> None:
    rng = random.Random(seed)
    records, term = _workload(rng)
    end = T + GRACE + 3600 * S
    expected = _replay(records, term, end)

    partition_of = {node: rng.randint(0, 2) for node in (A, B, C, D)}
    e = Partitioned(partition_of)
    streams: dict[int, deque[GpuXid | GpuHealth]] = {p: deque() for p in e.sides}
    for rec in records:
        streams[partition_of[rec.node]].append(rec)
    for p, stream in streams.items():  # end of input on every partition
        stream.append(health(next(n for n, q in partition_of.items() if q == p), "ok", end))
    job_event_sent = False
    while True:
        choices: list[tuple[str, int]] = [("signal", p) for p, s in streams.items() if s]
        choices += [("node", p) for p, q in e.to_nodes.items() if q]
        if e.to_job:
            choices.append(("job", 0))
        if not job_event_sent:
            choices.append(("event", 0))
        if not choices:
            break
        what, p = rng.choice(choices)
        if what == "signal":
            e.signal(streams[p].popleft())
        elif what == "node":
            e.deliver_to_node(p)
        elif what == "job":
            e.deliver_to_job()
        else:
            e.job_event(term)
            job_event_sent = True
    (got,) = e.decisions
    assert _key(got) == _key(expected), (seed, partition_of)


def test_a_pending_termination_written_before_the_completeness_rule_still_decides() -> None:
    """Job states restored from a changelog written by the previous version (answered and
    closed sets, no watermarks) keep working after an upgrade."""
    from streams.engine.decide import Termination, reason_evidence
    from streams.engine.job_side import Pending

    term = Termination("job-1", 0, T, (A, B), "OOMKilled", True, "standard", None)
    reason = reason_evidence(term, POLICY)
    assert reason is not None
    items = [reason.to_dict()]
    old = {"term": term.to_dict(), "items": items, "answered": [A, B], "closed": [A]}
    restored = Pending.from_dict(old)
    assert restored.complete[B] is None and restored.complete_to() is None
    side = JobSide(POLICY, {"job-1": JobState({0: restored})})
    closed = NodeReport("job-1", 0, B, (), initial=False, closed=True)  # an old-format report
    (d,) = side.on_node_report(closed)
    assert isinstance(d, Decision) and d.verdict == "software"


def test_a_node_answering_after_the_request_is_asked_too() -> None:
    """Hardware after the termination on A moves the decision time before B has answered:
    B is asked to report past it as soon as it answers, not left to wait for the grace."""
    e = Partitioned({A: 0, B: 1})
    e.job_event(terminated("job-1", [A, B], T))
    e.deliver_to_node(0)  # A answers; B's termination is still on its way
    e.signal(xid(A, 79, T + 5 * S))
    e.signal(health(A, "ok", T + 6 * S))
    while e.to_job:
        e.deliver_to_job()
    e.signal(health(B, "ok", T + 2 * S))
    e.drain_messages()  # B answers now, complete past T only
    e.signal(health(B, "ok", T + 5 * S + 1))
    e.drain_messages()
    (d,) = e.decisions
    assert (d.suspect_nodes, d.decided_ts_ms) == ((A,), T + 5 * S)


def test_a_termination_read_hours_after_newer_signals_of_its_node_still_finds_its_evidence() -> (
    None
):
    """The job side can lag the node side (down, rebalancing): evidence is kept for the
    policy's evidence retention after newer signals, so the decision does not depend on it."""
    e = Partitioned({A: 0})
    e.signal(xid(A, 79, T - 3 * S))
    e.signal(xid(A, 13, T + 3600 * S))  # the node's next job, an hour later, read first
    e.job_event(terminated("job-1", [A], T))
    e.drain_messages()
    (d,) = e.decisions
    assert (d.verdict, d.suspect_nodes) == ("hardware", (A,))


# -- the job side's bookkeeping ---------------------------------------------------------------


def _job_side_on_copies() -> tuple[JobSide, dict[str, dict[str, object]]]:
    """A job side whose table hands out copies, as faust's does (CodecTable over JSON dicts):
    a change that is not written back is lost, as it would be on Kafka."""
    from streams.tables import CodecTable

    raw: dict[str, dict[str, object]] = {}
    table = CodecTable(raw, JobState.from_dict, JobState.to_dict)  # type: ignore[arg-type]
    return JobSide(POLICY, table), raw


def _report(node: str, complete_to: int | None, *items: object, closed: bool = False) -> NodeReport:
    return NodeReport("job-1", 0, node, tuple(items), False, closed, complete_to)  # type: ignore[arg-type]


def test_progress_is_written_back_to_a_table_that_copies() -> None:
    side, raw = _job_side_on_copies()
    side.on_job_event(terminated("job-1", [A, B], T, reason="OOMKilled"))
    side.on_node_report(_report(A, T + GRACE + 1))
    assert raw["job-1"]["pending"]["0"]["complete"] == {A: T + GRACE + 1}  # type: ignore[index]
    (d,) = side.on_node_report(_report(B, T + GRACE + 1))
    assert isinstance(d, Decision) and d.verdict == "software"


def test_a_termination_without_nodes_decides_at_once_from_its_reason() -> None:
    side, raw = _job_side_on_copies()
    (d,) = side.on_job_event(terminated("job-1", [], T, reason="OOMKilled"))
    assert isinstance(d, Decision) and (d.verdict, d.decided_ts_ms) == ("software", T + GRACE)
    assert raw["job-1"]["decided"] == [0]


def test_stale_reports_are_counted_each_time() -> None:
    side, _ = _job_side_on_copies()
    side.on_node_report(_report(A, T))
    side.on_node_report(_report(A, T))
    assert side.stale_reports == 2


def _hardware(node: str, ts: int) -> object:
    from schemas.decisions import Evidence

    return Evidence(node, 0, "xid", 79, ts, "hardware")


def test_hardware_before_the_termination_asks_no_node_for_more() -> None:
    """Every node reports past T by itself: a request would only add messages."""
    side, _ = _job_side_on_copies()
    side.on_job_event(terminated("job-1", [A, B], T))
    assert side.on_node_report(_report(A, T - S, _hardware(A, T - 2 * S))) == []
    assert side.on_node_report(_report(B, T - S)) == []


def test_each_behind_node_is_asked_once_including_one_exactly_at_the_decision_time() -> None:
    side, _ = _job_side_on_copies()
    side.on_job_event(terminated("job-1", [A, B], T))
    side.on_node_report(_report(A, T + 1))
    side.on_node_report(_report(B, T + 5 * S))  # exactly at the coming decision time
    asked = side.on_node_report(_report(A, T + 1, _hardware(A, T + 5 * S)))
    assert sorted((m.node, m.until_ms) for m in asked) == [  # type: ignore[union-attr]
        (A, T + 5 * S),
        (B, T + 5 * S),
    ]
    assert side.on_node_report(_report(A, T + 2)) == []  # asked already: not again


def test_a_software_signal_at_the_very_start_of_the_attempt_is_this_attempts() -> None:
    """Only a signal that ended before the attempt started belongs to the previous tenant."""
    from failover_harness import Run, job_event

    r = Run()
    r.feed(job_event("job-1", "started", T - 10 * S, nodes=[A]), xid(A, 13, T - 10 * S))
    r.feed(terminated("job-1", [A], T), health(C, "ok", T + GRACE + 1))
    assert r.decision("job-1").verdict == "software"
