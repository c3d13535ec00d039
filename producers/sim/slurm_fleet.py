"""The simulated fleet on a real Slurm cluster: Slurm schedules the jobs, the sim breaks them.

No I/O. The session (`producers.sim.slurm_session`) submits the jobs with sbatch, shows this
object what Slurm and the pipeline say, and does what it asks: publish node records at their
time, and kill a job (the job's script exits with the code the sim writes for it). Ground truth
and grading are the simulator's own (`producers.sim.truth`).

Only the scenarios whose termination Slurm reports the way the sim means it are drawn: a job
killed on this cluster exits with a code and no reason (no cgroup OOM, no NCCL watchdog), so
`oom`, `nccl_unknown` and `hang`, whose truth rests on the reason, are left out.
"""

from __future__ import annotations

import heapq
import itertools
import random
from dataclasses import dataclass, field

from producers.hostlist import expand_hostlist
from producers.sim.faults import Signal, Timing, plan
from producers.sim.scenarios import SCENARIOS, Draw, pick_scenario
from producers.sim.truth import Incident, Mark, Seen

SLURM_SCENARIOS = tuple(
    s for s in SCENARIOS if s.target == "job" and s.name not in ("oom", "nccl_unknown", "hang")
)
# Seconds, not minutes: Slurm runs in real time and the demo lasts a couple of minutes.
SLURM_TIMING = Timing(
    detect_s=(1.0, 3.0),
    watchdog_s=6.0,
    hang_timeout_s=6.0,
    late_xid_s=(1.0, 4.0),
    precursor_lead_s=(2.0, 5.0),
    false_evidence_lead_s=(2.0, 5.0),
    flood_records=50,
    flood_span_s=3.0,
)
# The demo pipeline's policy and breaker, scaled to this pace as the x120 demo scales its
# clock: a grace longer than any late XID above; a lookback that spans an incident's records
# (at most ~11 s before its kill) but not the previous job's on a node repaired since; a
# breaker window that holds about one hardware incident, as the 64-node demo's does.
GRACE_S = 8
# slurmctld's epilog publishes `terminated` stamped when it runs: seconds after the kill.
HOOK_SLACK_S = 10
LOOKBACK_S = 15
BREAKER_WINDOW_S = 10
BREAKER_MAX_SHARE = 0.5
CONTINUING = ("failover", "retry")


@dataclass
class SlurmJob:
    """A job as Slurm shows it (`scontrol -o show job`)."""

    job_id: str
    state: str
    nodes: tuple[str, ...]
    restarts: int
    excluded: tuple[str, ...]


@dataclass(frozen=True)
class Kill:
    job_id: str
    attempt: int
    exit_code: int


@dataclass
class SlurmFleet:
    nodes: tuple[str, ...]
    seed: int
    start_ms: int
    mean_gap_s: float
    repair_s: float
    rng: random.Random = field(init=False)
    jobs: dict[str, SlurmJob] = field(default_factory=dict)
    sizes: dict[str, int] = field(default_factory=dict)  # live jobs: id -> nodes requested
    incidents: list[Incident] = field(default_factory=list)
    signals: dict[str, list[Signal]] = field(default_factory=dict)
    marks: dict[str, list[Mark]] = field(default_factory=dict)
    decisions: list[Seen] = field(default_factory=list)
    quarantines: list[tuple[str, int]] = field(default_factory=list)  # node, ts
    drained_seen: set[str] = field(default_factory=set)  # drained by us, as Slurm showed
    drained_now: set[str] = field(default_factory=set)  # ... at the last look
    # (job, attempt that failed) -> ExcNodeList once Slurm shows a later attempt, and -> the
    # nodes that later attempt runs on once it runs
    requeued: dict[tuple[str, int], tuple[str, ...]] = field(default_factory=dict)
    ran_again: dict[tuple[str, int], tuple[str, ...]] = field(default_factory=dict)
    next_incident_ms: int = 0
    _heap: list[tuple[int, int, Signal | Kill]] = field(default_factory=list)
    _seq: itertools.count[int] = field(default_factory=itertools.count)

    def __post_init__(self) -> None:
        self.rng = random.Random(f"{self.seed}/slurm")  # noqa: S311 - a simulation's dice
        self.next_incident_ms = self.start_ms + self._gap_ms()

    def _gap_ms(self) -> int:
        return int(self.rng.expovariate(1.0 / self.mean_gap_s) * 1000)

    # -- what Slurm shows --------------------------------------------------------------------
    def observe(self, jobs: list[dict[str, str]], nodes: list[dict[str, str]]) -> None:
        for j in jobs:
            job = SlurmJob(
                j.get("JobId", ""),
                j.get("JobState", ""),
                _hosts(j.get("NodeList")),
                int(j.get("Restarts", "0")),
                _hosts(j.get("ExcNodeList")),
            )
            self.jobs[job.job_id] = job
            for attempt in range(job.restarts - 1):
                self.requeued.setdefault((job.job_id, attempt), job.excluded)
            if job.restarts > 0:
                # The requeue sets ExcNodeList after `requeuehold`: the latest look counts.
                self.requeued[(job.job_id, job.restarts - 1)] = job.excluded
            if job.state == "RUNNING" and job.restarts > 0:
                self.ran_again.setdefault((job.job_id, job.restarts - 1), job.nodes)
        if nodes:
            self.drained_now = {
                n.get("NodeName", "")
                for n in nodes
                if "DRAIN" in n.get("State", "") and n.get("Reason", "").startswith("gpufailover:")
            }
            self.drained_seen |= self.drained_now

    def room(self) -> int:
        """Nodes no live job asks for: the session submits a job of at most this size."""
        return len(self.nodes) - sum(self.sizes.values())

    def job_size(self) -> int:
        return 2 if self.room() >= 2 and self.rng.random() < 0.5 else 1

    # -- incidents ---------------------------------------------------------------------------
    def maybe_incident(self, now_ms: int, accepting: bool) -> None:
        """Break a running job whose current attempt is still unharmed, when one is due."""
        if not accepting or now_ms < self.next_incident_ms:
            return
        hit = {(i.job_id, i.attempt) for i in self.incidents}
        # Not on a node inside the grace of the last job that died there: its signals would be
        # in that job's window too (the 64-node demo rarely reuses a node that fast).
        settling = {
            n
            for i in self.incidents
            if i.term_ms is not None and now_ms <= i.term_ms + (GRACE_S + HOOK_SLACK_S) * 1000
            for n in i.nodes
        }
        running = [
            j
            for j in self.jobs.values()
            if j.state == "RUNNING"
            and j.job_id in self.sizes
            and (j.job_id, j.restarts) not in hit
            and not settling & set(j.nodes)
        ]
        if not running:
            return  # due: the next running job gets it
        job = self.rng.choice(sorted(running, key=lambda j: int(j.job_id)))
        self._incident(job, now_ms)
        self.next_incident_ms = now_ms + self._gap_ms()

    def _incident(self, job: SlurmJob, now_ms: int) -> None:
        s = pick_scenario(self.rng, SLURM_SCENARIOS)
        xid = s.signal_kind == "xid"
        d = Draw(
            at_ms=now_ms,
            scenario=s.name,
            code=self.rng.choice(s.codes) if s.codes else None,
            late_xid=s.true_class == "hardware" and xid and self.rng.random() < 0.15,
            flood=xid and self.rng.random() < 0.1,
            precursor=s.name in ("ecc_xid", "ecc_health") and self.rng.random() < 0.3,
            decoy=self.rng.random() < 0.2,
            false_evidence=s.true_class == "software" and self.rng.random() < 0.15,
        )
        node = self.rng.choice(job.nodes)
        outside = [n for n in self.nodes if n not in job.nodes]
        decoy = self.rng.choice(outside) if outside else None
        p = plan(d, self.rng, SLURM_TIMING, job_nodes=job.nodes, node=node, decoy_node=decoy)
        assert p.term_ms is not None
        inc = Incident(
            len(self.incidents) + 1, s.name, s.true_class, p.flags, p.onset_ms, job.job_id,
            job.restarts, job.nodes, p.faulty_node, p.term_ms,
            None,  # what Slurm reports: an exit code, no reason
        )  # fmt: skip
        self.incidents.append(inc)
        for sig in p.signals:
            self._push(sig.ts_ms, sig)
        self._push(p.term_ms, Kill(job.job_id, job.restarts, p.exit_code or 1))
        if p.faulty_node is not None and s.true_class == "hardware":
            self._mark(p.faulty_node, p.onset_ms, "broken")
        for sig in p.signals:
            if sig.part == "precursor":
                self._mark(sig.node, sig.ts_ms, "degraded")
            elif sig.part == "spurious":
                self._mark(sig.node, sig.ts_ms, "spurious")

    def _push(self, ts_ms: int, item: Signal | Kill) -> None:
        heapq.heappush(self._heap, (ts_ms, next(self._seq), item))

    def _mark(self, node: str, ts_ms: int, kind: str) -> None:
        self.marks.setdefault(node, []).append(Mark(ts_ms, kind))

    def due(self, now_ms: int) -> list[Signal | Kill]:
        out: list[Signal | Kill] = []
        while self._heap and self._heap[0][0] <= now_ms:
            item = heapq.heappop(self._heap)[2]
            if isinstance(item, Signal):
                self.signals.setdefault(item.node, []).append(item)
            out.append(item)
        return out

    def killed(self, kill: Kill, wall_ms: int) -> None:
        for inc in self.incidents:
            if (inc.job_id, inc.attempt) == (kill.job_id, kill.attempt):
                inc.term_wall_ms = wall_ms

    # -- what the pipeline publishes ---------------------------------------------------------
    def on_decision(self, seen: Seen, terminated_ts_ms: int | None = None) -> None:
        """`terminated_ts_ms`: the termination's time as the hook published it, the `T` of the
        pipeline's window, which the grading then uses too (the kill's time stays the start
        of the decision's latency)."""
        self.decisions.append(seen)
        for inc in self.incidents:
            if terminated_ts_ms is not None and (inc.job_id, inc.attempt) == (
                seen.job_id,
                seen.attempt,
            ):
                inc.term_ms = terminated_ts_ms
        if seen.action not in CONTINUING:
            self.sizes.pop(seen.job_id, None)  # the job stays ended: its nodes are free

    def on_quarantine(self, node: str, state: str, ts_ms: int) -> float | None:
        """A quarantine of ours: when (monotonic delay in s) the sim's repair releases it."""
        if state != "quarantined" or node not in self.nodes or ts_ms < self.start_ms:
            return None
        self.quarantines.append((node, ts_ms))
        return self.repair_s

    def repaired(self, node: str, ts_ms: int) -> None:
        self._mark(node, ts_ms, "repaired")

    # -- progress ----------------------------------------------------------------------------
    def failovers(self) -> list[Seen]:
        return [d for d in self.decisions if d.action in CONTINUING]

    def outstanding(self) -> int:
        """Kills done without a decision, and failovers Slurm has not run again yet."""
        decided = {(d.job_id, d.attempt) for d in self.decisions}
        waiting = sum(
            1
            for i in self.incidents
            if i.term_wall_ms is not None and (i.job_id, i.attempt) not in decided
        )
        pending = sum(1 for d in self.failovers() if (d.job_id, d.attempt) not in self.requeued)
        return waiting + pending + len([1 for _, _, x in self._heap if isinstance(x, Kill)])


def _hosts(expr: str | None) -> tuple[str, ...]:
    return () if not expr or expr == "(null)" else expand_hostlist(expr)


def incident_summary(fleet: SlurmFleet) -> dict[str, int]:
    by: dict[str, int] = {}
    for i in fleet.incidents:
        by[i.scenario] = by.get(i.scenario, 0) + 1
    return dict(sorted(by.items(), key=lambda kv: (-kv[1], kv[0])))
