"""One large synchronous job on a fleet, in simulated time, with the real decision engine
in-process (`streams.engine.local.LocalPipeline`, what `gpufailover replay` runs; no broker).

Incidents are the simulator's (`producers.sim.scenarios`: the failure mix of failure-data.md,
with its hard cases) and so are the records they produce (`producers.sim.faults.plan`). The
engine decides on those records; its decision is acted on `decision_latency_ms` later:
failover/retry restart the job at once on its nodes minus the suspects and every quarantined
node (replaced from the spare pool), anything else stops the job until a person restarts it
(`person_ms` after it died, as a new job: the retry cap starts again). Consequences are
simulated, so the engine's mistakes cost what they would: a broken node left in the job fails
it again 30 s after the restart, a software bug comes back 5-20 min after a wrong failover,
and every quarantined node (right or wrong) is out of the spare pool until it is repaired.

Each incident has its own random stream, so the baselines (`producers.sim.goodput`) see the
same onsets and terminations as the live run.
"""

from __future__ import annotations

import heapq
import itertools
import random
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from producers.sim.faults import Plan, Signal, Timing, plan
from producers.sim.goodput import (
    HOUR_MS,
    LLAMA3_RATE,
    MINUTE_MS,
    Interruption,
    LiveStop,
    Params,
)
from producers.sim.records import signal_out
from producers.sim.scenarios import BY_NAME, SCENARIOS, Draw, Modifiers, draw_trace
from schemas.codec import DECODERS
from schemas.decisions import Decision
from schemas.engine import QuarantineRequest
from schemas.health import GpuHealth
from schemas.jobs import JobEvent
from schemas.topics import Topic
from streams.engine.local import LocalPipeline, Output
from streams.policy import Policy

JOB_SHARE = sum(s.weight for s in SCENARIOS if s.target == "job") / sum(s.weight for s in SCENARIOS)
TICK_MS = 5_000  # the clock's step while a termination waits for its decision
DECISION_DEADLINE_MS = 5 * MINUTE_MS  # the job-status service's decision deadline (300 s)
REFAIL_MS = 30_000  # a job restarted on a broken node dies again this soon
FORCED = 1_000_000_000  # incident keys from here on: consequences of gpufailover's decisions
CLOCK_NODE = "goodput-clock"  # its `ok` samples move the engine's event time
WARMUP_MS = 5 * MINUTE_MS  # no incident before the job's first start-up is under way
START_MS = 1_767_225_600_000  # 2026-01-01T00:00Z: a fixed start keeps runs reproducible


@dataclass(frozen=True)
class RunConfig:
    nodes: int = 2048  # nodes the job runs on (8 GPUs each)
    spares: int = 32  # healthy nodes a failover can take
    days: float = 30.0
    seed: int = 1
    rate_per_node_hour: float = LLAMA3_RATE  # job interruptions (the sim's node-only extra)
    repair_ms: int = 24 * HOUR_MS  # a quarantined node comes back after this
    false_evidence: float | None = None  # None: the sim's default (software failures only)
    params: Params = field(default_factory=Params)
    timing: Timing = field(default_factory=Timing)
    mods: Modifiers = field(default_factory=Modifiers)

    def __post_init__(self) -> None:
        if self.nodes < 1 or self.spares < 0:
            raise ValueError("nodes must be at least 1 and spares not negative")
        if self.days <= 0:
            raise ValueError("days must be positive")
        if self.rate_per_node_hour < 0:
            raise ValueError("the failure rate must not be negative")
        if self.false_evidence is not None and not 0 <= self.false_evidence <= 1:
            raise ValueError("false_evidence is a probability (0..1)")

    @property
    def horizon_ms(self) -> int:
        return int(self.days * 24 * HOUR_MS)


@dataclass
class RunResult:
    stops: list[LiveStop]
    interruptions: list[Interruption]  # the primary job failures, for the baselines
    decisions: Counter[str] = field(default_factory=Counter)  # "truth->verdict/action"
    quarantines: Counter[str] = field(default_factory=Counter)  # justified | precursor | false
    false_node_hours: float = 0.0  # healthy nodes kept out by a false quarantine
    person_restarts: int = 0
    give_ups: int = 0
    secondary: Counter[str] = field(default_factory=Counter)  # refail_on_broken | bug_recurs
    waited_for_spares: int = 0
    undecided: int = 0  # no decision by the deadline: a person restarted the job
    engine_decision_s: list[float] = field(default_factory=list)  # termination -> decision


@dataclass
class _Job:
    job_id: str
    nodes: list[str]
    attempt: int = 0
    state: str = "running"  # running | doomed (hit, not dead yet) | deciding | decided | down
    term_ms: int = 0
    bug: str | None = None  # a software fault that comes back on every attempt
    truth: str = ""  # the true class of the failure being decided
    exclude: set[str] = field(default_factory=set)  # nodes the next attempt must not use


def drawn_incidents(cfg: RunConfig) -> list[tuple[int, Draw]]:
    """The drawn incidents, each with its index (its own random stream)."""
    rng = random.Random(cfg.seed)  # noqa: S311 - a simulation's dice
    start = START_MS + WARMUP_MS
    rate = cfg.rate_per_node_hour * cfg.nodes / JOB_SHARE if JOB_SHARE else 0.0
    trace = draw_trace(rng, start, START_MS + cfg.horizon_ms, rate, cfg.mods)
    if cfg.false_evidence is None:
        return list(enumerate(trace))
    fe = random.Random(f"{cfg.seed}/false-evidence")  # noqa: S311
    out = []
    for k, d in enumerate(trace):
        s = BY_NAME[d.scenario]
        if s.target == "job" and s.true_class != "hardware":
            d = replace(d, false_evidence=fe.random() < cfg.false_evidence)
        out.append((k, d))
    return out


class GoodputRun:
    def __init__(
        self, cfg: RunConfig, policy: Policy, progress: Callable[[int], None] | None = None
    ) -> None:
        self.cfg, self.p = cfg, cfg.params
        self.engine = LocalPipeline(policy)
        self.end_ms = START_MS + cfg.horizon_ms
        self.progress = progress
        names = [f"gpu-node-{i:04d}" for i in range(1, cfg.nodes + cfg.spares + 1)]
        self.job = _Job("train-0001", names[: cfg.nodes])
        self.free: list[str] = names[cfg.nodes :]  # healthy spares, in preference order
        self.quarantined: dict[str, int] = {}
        self.broken: dict[str, Draw] = {}  # truth: node -> the fault that broke it
        self.degraded: set[str] = set()  # truth: a precursor was seen on it
        self.false_since: dict[str, int] = {}
        self.waiting = False  # a failover waits for a spare
        self.rng = random.Random(f"{cfg.seed}/consequences")  # noqa: S311
        self.result = RunResult([], [])
        self._heap: list[tuple[int, int, str, Any]] = []
        self._seq = itertools.count()
        self._jobs = itertools.count(2)

    # -- events ----------------------------------------------------------------------------
    def _at(self, ts: int, kind: str, payload: Any) -> None:
        heapq.heappush(self._heap, (ts, next(self._seq), kind, payload))

    def run(self) -> RunResult:
        self._feed_job(JobEvent(self.job.job_id, 0, "started", START_MS, nodes=self._nodes()))
        for k, d in drawn_incidents(self.cfg):
            self._at(d.at_ms, "incident", (k, d, None))
        handlers: dict[str, Callable[[int, Any], None]] = {
            "incident": self._incident,
            "signal": self._signal,
            "onset": self._onset,
            "terminate": self._terminate,
            "tick": self._tick,
            "apply": self._apply,
            "person": self._person,
            "repair": self._repair,
            "fix": self._fix,
        }
        day = 0
        while self._heap and self._heap[0][0] < self.end_ms:
            ts, _, kind, payload = heapq.heappop(self._heap)
            if self.progress is not None and (ts - START_MS) // (24 * HOUR_MS) > day:
                day = (ts - START_MS) // (24 * HOUR_MS)
                self.progress(day)
            handlers[kind](ts, payload)
        for since in self.false_since.values():  # still out at the end of the run
            self.result.false_node_hours += (self.end_ms - since) / HOUR_MS
        return self.result

    # -- incidents -------------------------------------------------------------------------
    def _incident(self, now: int, payload: tuple[int, Draw, str | None]) -> None:
        k, d, forced_node = payload
        s = BY_NAME[d.scenario]
        rng = random.Random(f"{self.cfg.seed}/incident/{k}")  # noqa: S311
        job = self.job
        if s.target == "job":
            if forced_node is not None and forced_node not in job.nodes:
                return
            node = forced_node or job.nodes[rng.randrange(len(job.nodes))]
            decoy = self.free[0] if self.free else None
            pl = plan(d, rng, self.cfg.timing, job_nodes=tuple(job.nodes), node=node,
                      decoy_node=decoy)  # fmt: skip
            if k < FORCED and pl.term_ms is not None:  # drawn, not a consequence
                self.result.interruptions.append(
                    Interruption(pl.onset_ms, pl.term_ms, s.true_class)
                )
            if job.state != "running":
                return  # the job is down or already failing: the fault misses it
            job.state = "doomed"
            self._at(pl.onset_ms, "onset", (pl, s.true_class, d))
            if pl.term_ms is not None:
                self._at(pl.term_ms, "terminate", (pl, s.true_class, d))
        else:
            on_job = s.true_class == "precursor"
            pool = job.nodes if on_job else self.free
            if not pool:
                return
            pl = plan(d, rng, self.cfg.timing, node=pool[rng.randrange(len(pool))])
            if s.true_class == "hardware" and pl.faulty_node is not None:
                self._break(now, pl.faulty_node, d)
        for sig in pl.signals:
            self._at(max(sig.ts_ms, now), "signal", sig)

    def _break(self, now: int, node: str, d: Draw) -> None:
        if node not in self.broken:
            self.broken[node] = d
            self._at(now + self.p.person_ms, "fix", node)

    def _signal(self, now: int, sig: Signal) -> None:
        if sig.part == "precursor":
            self.degraded.add(sig.node)
        value = signal_out(sig).value
        record = DECODERS[Topic.GPU_XID if sig.kind == "xid" else Topic.GPU_HEALTH](value)
        self._outputs(now, self.engine.feed(record))

    def _onset(self, now: int, payload: tuple[Plan, str, Draw]) -> None:
        pl, true_class, d = payload
        if true_class == "hardware" and pl.faulty_node is not None:
            self._break(now, pl.faulty_node, d)
        # Its resume is set when the job starts again.
        self.result.stops.append(LiveStop(now, self.end_ms, true_class, automatic=False))

    def _terminate(self, now: int, payload: tuple[Plan, str, Draw]) -> None:
        pl, true_class, d = payload
        job = self.job
        job.state, job.term_ms, job.truth = "deciding", now, true_class
        if true_class == "software":
            job.bug = d.scenario
        self._feed_job(
            JobEvent(job.job_id, job.attempt, "terminated", now, nodes=self._nodes(),
                     exit_code=pl.exit_code, reason=pl.reason,
                     max_failovers=self.p.max_failovers)
        )  # fmt: skip
        self._at(now + 1_000, "tick", (job.job_id, job.attempt))

    def _tick(self, now: int, key: tuple[str, int]) -> None:
        """Move event time until the engine has decided the pending termination."""
        if (self.job.job_id, self.job.attempt) != key or self.job.state != "deciding":
            return
        self._outputs(now, self.engine.feed(GpuHealth(CLOCK_NODE, now, "ok", severity="info")))
        if self.job.state != "deciding":
            return
        if now < self.job.term_ms + DECISION_DEADLINE_MS:
            self._at(now + TICK_MS, "tick", key)
        else:  # the job-status service's overdue alert: a person takes over
            self.result.undecided += 1
            self.job.state = "down"
            self._at(self.job.term_ms + self.p.person_ms, "person", self.job.job_id)

    # -- the engine's output ---------------------------------------------------------------
    def _outputs(self, now: int, outputs: list[Output]) -> None:
        for out in outputs:
            if isinstance(out, Decision):
                if (out.job_id, out.attempt) == (self.job.job_id, self.job.attempt):
                    self.job.state = "decided"
                    self.result.engine_decision_s.append((now - out.terminated_ts_ms) / 1000)
                self._at(now + self.p.decision_latency_ms, "apply", out)
            elif isinstance(out, QuarantineRequest):
                self._quarantine(now, out.node)

    def _quarantine(self, now: int, node: str) -> None:
        if node in self.quarantined:
            return
        self.quarantined[node] = now
        if node in self.free:
            self.free.remove(node)
        kind = "justified" if node in self.broken else "precursor" if node in self.degraded else (
            "false"
        )  # fmt: skip
        self.result.quarantines[kind] += 1
        if kind == "false":
            self.false_since[node] = now
        self._at(now + self.cfg.repair_ms, "repair", node)

    def _apply(self, now: int, d: Decision) -> None:
        job = self.job
        if (d.job_id, d.attempt) != (job.job_id, job.attempt) or job.state != "decided":
            return
        self.result.decisions[f"{job.truth}->{d.verdict}/{d.action}"] += 1
        job.state = "down"
        if d.action in ("failover", "retry"):
            # The requeue service's exclusion: the suspects and every quarantined node.
            job.exclude = set(d.suspect_nodes) | set(self.quarantined)
            self._try_start(now)
            return
        if d.action == "give_up":
            self.result.give_ups += 1
        self._at(max(now, job.term_ms + self.p.person_ms), "person", job.job_id)

    def _person(self, now: int, job_id: str) -> None:
        """A person fixes what stopped the job (the code, a broken node) and starts it anew:
        a new job, so the retry cap starts again."""
        job = self.job
        if job.job_id != job_id or job.state != "down":
            return
        self.result.person_restarts += 1
        for n in job.nodes:
            if n in self.broken and n not in self.quarantined:  # sent to repair
                self.quarantined[n] = now
                self._at(now + self.cfg.repair_ms, "repair", n)
        job.job_id, job.attempt, job.bug = f"train-{next(self._jobs):04d}", -1, None
        job.exclude = set(self.quarantined)
        self._try_start(now)

    def _try_start(self, now: int) -> None:
        """The next attempt on the job's nodes minus its exclusions, topped up from the spare
        pool; without enough spares it waits for a repair."""
        job = self.job
        keep = [n for n in job.nodes if n not in job.exclude]
        need = len(job.nodes) - len(keep)
        if need > len(self.free):
            if not self.waiting:
                self.result.waited_for_spares += 1
            self.waiting = True
            return
        self.waiting = False
        taken, self.free = self.free[:need], self.free[need:]
        self.free.extend(n for n in job.nodes if n in job.exclude and n not in self.quarantined)
        job.nodes, job.attempt, job.state, job.exclude = (
            keep + taken,
            job.attempt + 1,
            "running",
            set(),
        )
        self._started(now)

    def _started(self, now: int) -> None:
        job = self.job
        self._feed_job(JobEvent(job.job_id, job.attempt, "started", now, nodes=self._nodes()))
        stops = self.result.stops
        if stops and stops[-1].resume_ms == self.end_ms:
            stops[-1] = replace(stops[-1], resume_ms=now, automatic=job.attempt > 0)
        broken = [n for n in job.nodes if n in self.broken]
        if broken:  # nobody took the broken node out: the job dies on it again
            fault = self.broken[broken[0]]
            self.result.secondary["refail_on_broken"] += 1
            again = Draw(now + REFAIL_MS, fault.scenario, fault.code)
            self._at(again.at_ms, "incident", (self._forced_key(), again, broken[0]))
        elif job.bug is not None:  # the user's bug comes back
            self.result.secondary["bug_recurs"] += 1
            code = self.rng.choice(BY_NAME[job.bug].codes or (None,))
            again = Draw(now + self.rng.randrange(5, 20) * MINUTE_MS, job.bug, code)
            self._at(again.at_ms, "incident", (self._forced_key(), again, None))

    def _forced_key(self) -> int:
        return FORCED + next(self._seq)  # its own stream, apart from the drawn incidents

    def _repair(self, now: int, node: str) -> None:
        if self.quarantined.pop(node, None) is None:
            return
        self.broken.pop(node, None)
        self.degraded.discard(node)
        since = self.false_since.pop(node, None)
        if since is not None:
            self.result.false_node_hours += (now - since) / HOUR_MS
        self.engine.release(node, now)
        if node not in self.job.nodes:
            self.free.append(node)
        if self.waiting:
            self._try_start(now)

    def _fix(self, now: int, node: str) -> None:
        """A broken node nobody quarantined: a person finds and fixes it (as in the demo)."""
        if node not in self.quarantined:
            self.broken.pop(node, None)

    # -- helpers ---------------------------------------------------------------------------
    def _nodes(self) -> tuple[str, ...]:
        return tuple(self.job.nodes)

    def _feed_job(self, event: JobEvent) -> None:
        self._outputs(event.ts_ms, self.engine.feed(event))
