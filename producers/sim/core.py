"""The simulated fleet's discrete-event core: nodes, jobs, incidents and the scheduler.

No I/O: `advance(now)` runs every event due by `now` and returns the records to publish.
`producers.sim.engine.SimEngine` adds the reactions to what the pipeline publishes.
"""

from __future__ import annotations

import heapq
import itertools
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from producers.sim.bind import flags_of, pick_decoy, pick_job, pick_node
from producers.sim.config import SimConfig
from producers.sim.faults import Plan, Signal, plan
from producers.sim.fleet import Job, JobQueue, place
from producers.sim.jobs import JobBook
from producers.sim.records import Out, ok_out, release_out, signal_out
from producers.sim.scenarios import BY_NAME, Draw, draw_trace
from producers.sim.truth import Incident, Mark, Seen

Event = tuple[int, int, str, Any]
FAILING = frozenset({"doomed", "failing", "deciding"})
EPILOG = "(epilog)"  # job_on value of a node finishing its last job's epilog


@dataclass(frozen=True, slots=True)
class Forced:
    """An incident bound in advance to one attempt of a job and one node."""

    job_id: str
    attempt: int
    node: str
    why: str  # on_broken_node | bug_recurs


class FleetCore:
    def __init__(self, cfg: SimConfig, start_ms: int) -> None:
        self.cfg, self.start_ms, self.now_ms = cfg, start_ms, start_ms
        self.end_ms = start_ms + cfg.horizon_ms
        self.nodes = cfg.node_names
        # Separate streams, so that what the pipeline's timing changes (which jobs run when)
        # perturbs as little of the rest as possible. A simulation's dice, not cryptography.
        trace_rng = random.Random(cfg.seed)  # noqa: S311
        self.rng = random.Random(f"{cfg.seed}/bind")  # noqa: S311
        self.lemons = frozenset(trace_rng.sample(self.nodes, min(cfg.lemon_count, cfg.nodes)))
        self.trace = draw_trace(
            trace_rng,
            start_ms + cfg.warmup_ms,
            self.end_ms - cfg.tail_ms,
            cfg.rate_per_node_hour * cfg.nodes,
            cfg.mods,
        )
        self.book = JobBook(cfg, random.Random(f"{cfg.seed}/workload"))  # noqa: S311
        self.queue = JobQueue()
        self.job_on: dict[str, str] = {}
        self.quarantined: set[str] = set()
        self.broken: dict[str, Draw] = {}  # truth: node -> the fault that broke it
        self.repairing: set[str] = set()
        self.marks: dict[str, list[Mark]] = {}
        self.signals: dict[str, list[Signal]] = {}
        self.incidents: list[Incident] = []
        self.by_attempt: dict[tuple[str, int], Incident] = {}
        self.skipped: list[str] = []  # scenarios drawn when nothing fit them
        self.decisions: list[Seen] = []
        self.quarantines: list[tuple[str, int, str, str | None]] = []  # node, ts, reason, job
        self.checkpoints: list[tuple[int, int | None]] = []  # per requeue: (expected, carried)
        self._heap: list[Event] = []
        self._seq = itertools.count()
        self._ids = itertools.count(1)
        for i, node in enumerate(self.nodes):
            self._at(start_ms + i * cfg.health_interval_ms // len(self.nodes), "health", node)
        self._at(start_ms + cfg.heartbeat_ms, "telemetry", None)
        for d in self.trace:
            self._at(d.at_ms, "incident", (d, None))
        self._at(start_ms, "workload", None)

    # -- time ------------------------------------------------------------------------------
    def _at(self, ts_ms: int, kind: str, payload: Any) -> None:
        heapq.heappush(self._heap, (ts_ms, next(self._seq), kind, payload))

    def next_event_ms(self) -> int | None:
        return self._heap[0][0] if self._heap else None

    def advance(self, now_ms: int) -> list[Out]:
        """Run every event due by `now_ms`, in time order."""
        out: list[Out] = []
        handlers: dict[str, Callable[[Any], list[Out]]] = {
            "health": self._health,
            "telemetry": self._telemetry,
            "incident": self._incident,
            "signal": self._signal,
            "onset": self._onset,
            "terminate": self._terminate,
            "complete": self._complete,
            "checkpoint": self._checkpoint,
            "epilog_done": self._epilog_done,
            "repair": self._repair,
            "operator_fix": self._operator_fix,
            "workload": lambda _: self._schedule(),
        }
        while self._heap and self._heap[0][0] <= now_ms:
            ts, _, kind, payload = heapq.heappop(self._heap)
            self.now_ms = max(self.now_ms, ts)
            out.extend(handlers[kind](payload))
        self.now_ms = max(self.now_ms, now_ms)
        return out

    # -- periodic records ------------------------------------------------------------------
    def _health(self, node: str) -> list[Out]:
        self._at(self.now_ms + self.cfg.health_interval_ms, "health", node)
        return [ok_out(node, self.now_ms)]

    def _telemetry(self, _: Any) -> list[Out]:
        self._at(self.now_ms + self.cfg.heartbeat_ms, "telemetry", None)
        return self.book.telemetry(self.now_ms)

    # -- incidents -------------------------------------------------------------------------
    def _incident(self, payload: tuple[Draw, Forced | None]) -> list[Out]:
        d, forced = payload
        s = BY_NAME[d.scenario]
        if d.at_ms > self.end_ms - self.cfg.tail_ms // 2:
            self.skipped.append(d.scenario)  # too late to be decided before the run ends
            return []
        t = self.cfg.timing
        lead_max = int(max(t.precursor_lead_s[1], t.false_evidence_lead_s[1]) * 1000)
        job: Job | None = None
        if s.target == "job":
            picked = self._pick_job(d, forced, d.at_ms + lead_max + 60_000)
            if picked is None:
                self.skipped.append(d.scenario)
                return []
            job, node = picked
            decoy = pick_decoy(self.rng, self.nodes, job, self.job_on)
            p = plan(d, self.rng, t, job_nodes=job.nodes, node=node, decoy_node=decoy)
            job.state = "doomed"
        else:
            failing = {n for j in self.book.jobs.values() if j.state in FAILING for n in j.nodes}
            unavailable = self.quarantined | set(self.broken)
            picked_node = pick_node(
                self.rng, d.scenario, self.nodes, unavailable, self.job_on, failing
            )
            if picked_node is None:
                self.skipped.append(d.scenario)
                return []
            node, p = picked_node, plan(d, self.rng, t, node=picked_node)
        flags = flags_of(p.flags, p.faulty_node, self.lemons, forced.why if forced else None)
        inc = Incident(
            next(self._ids), d.scenario, s.true_class, flags, p.onset_ms,
            job_id=job.job_id if job else None, attempt=job.attempt if job else None,
            nodes=job.nodes if job else (node,), faulty_node=p.faulty_node, term_ms=p.term_ms,
            reason=p.reason, primary=forced is None,
        )  # fmt: skip
        self.incidents.append(inc)
        if job is not None:
            self.by_attempt[(job.job_id, job.attempt)] = inc
        for sig in p.signals:
            self._at(sig.ts_ms, "signal", sig)
        self._at(p.onset_ms, "onset", (inc, p, d))
        if p.term_ms is not None:
            self._at(p.term_ms, "terminate", (inc, p))
        return []

    def _pick_job(self, d: Draw, forced: Forced | None, until_ms: int) -> tuple[Job, str] | None:
        if forced is not None:  # a consequence of an earlier outcome, on a given attempt
            job = self.book.jobs[forced.job_id]
            ok = job.state == "running" and job.attempt == forced.attempt
            return (job, forced.node) if ok else None
        running = [j for j in self.book.running() if self.book.finishes_after(j, until_ms)]
        return pick_job(self.rng, running, self.lemons, d)

    def _signal(self, sig: Signal) -> list[Out]:
        self.signals.setdefault(sig.node, []).append(sig)
        if sig.part == "spurious":
            self._mark(sig.node, sig.ts_ms, "spurious")
        elif sig.part == "precursor" and sig.node not in self.broken:
            self._mark(sig.node, sig.ts_ms, "degraded")
        return [signal_out(sig)]

    def _onset(self, payload: tuple[Incident, Plan, Draw]) -> list[Out]:
        inc, p, d = payload
        node = p.faulty_node
        if node is not None and inc.true_class == "hardware" and node not in self.broken:
            self.broken[node] = d
            self._mark(node, p.onset_ms, "broken")
            self._at(p.onset_ms + self.cfg.costs.mttr_ms, "operator_fix", node)
        if inc.job_id is not None:
            self.book.fail(self.book.jobs[inc.job_id], self.now_ms)
        return []

    def _terminate(self, payload: tuple[Incident, Plan]) -> list[Out]:
        inc, p = payload
        job = self.book.jobs[inc.job_id or ""]
        if inc.true_class == "software":
            job.bug = inc.scenario
        out = [self.book.terminated(job, self.now_ms, p.reason, p.exit_code, inc)]
        return out + self._free(job) + self._schedule()

    def _complete(self, payload: tuple[str, int]) -> list[Out]:
        job = self.book.jobs[payload[0]]
        if job.state != "running" or job.attempt != payload[1]:
            return []
        out = [self.book.succeeded(job, self.now_ms)]
        return out + self._free(job) + self._schedule()

    def _checkpoint(self, payload: tuple[str, int]) -> list[Out]:
        job = self.book.jobs[payload[0]]
        if job.state not in ("running", "doomed") or job.attempt != payload[1]:
            return []
        self._at(self.now_ms + self.cfg.costs.checkpoint_ms, "checkpoint", payload)
        return [self.book.checkpoint(job, self.now_ms)]

    # -- nodes -----------------------------------------------------------------------------
    def _mark(self, node: str, ts_ms: int, kind: str) -> None:
        self.marks.setdefault(node, []).append(Mark(ts_ms, kind))

    def _free(self, job: Job) -> list[Out]:
        """The job's nodes run its epilog (Slurm: COMPLETING) before the next job can have them:
        the time in which a real scheduler hears of the quarantine of a node that just failed."""
        for n in job.nodes:
            if self.job_on.get(n) == job.job_id:
                self.job_on[n] = EPILOG
        self._at(self.now_ms + self.cfg.epilog_ms, "epilog_done", job.nodes)
        return []

    def _epilog_done(self, nodes: tuple[str, ...]) -> list[Out]:
        out: list[Out] = []
        for n in nodes:
            if self.job_on.get(n) == EPILOG:
                del self.job_on[n]
                out += self._maybe_repair(n)
        return out + self._schedule()

    def _maybe_repair(self, node: str) -> list[Out]:
        if node in self.quarantined and node not in self.job_on and node not in self.repairing:
            self.repairing.add(node)
            self._at(self.now_ms + self.cfg.repair_ms, "repair", node)
        return []

    def _repair(self, node: str) -> list[Out]:
        self.repairing.discard(node)
        if node not in self.quarantined:
            return []
        self.quarantined.discard(node)
        self.broken.pop(node, None)
        self._mark(node, self.now_ms, "repaired")
        return [release_out(node, self.now_ms), *self._schedule()]

    def _operator_fix(self, node: str) -> list[Out]:
        """A broken node nobody quarantined: a person finds and fixes it after the MTTR."""
        if node in self.broken and node not in self.quarantined:
            del self.broken[node]
            self._mark(node, self.now_ms, "repaired")
        return []

    # -- scheduler -------------------------------------------------------------------------
    def _schedule(self) -> list[Out]:
        out = self.book.top_up(self.queue, self.now_ms, len(self.nodes) - len(self.quarantined))
        free = [n for n in self.nodes if n not in self.job_on]
        for job_id, nodes in place(self.queue, free, self.quarantined):
            job = self.book.jobs[job_id]
            for n in nodes:
                self.job_on[n] = job_id
            out.append(self.book.started(job, nodes, self.now_ms))
            self._at(self.book.completion_ms(job), "complete", (job.job_id, job.attempt))
            self._at(self.book.first_checkpoint_ms(job), "checkpoint", (job.job_id, job.attempt))
            broken = [n for n in nodes if n in self.broken]
            if broken:  # a broken node nobody quarantined: the job dies on it again
                fault = self.broken[broken[0]]
                self._again(job, fault.scenario, fault.code, broken[0], 30_000, "on_broken_node")
            elif job.bug is not None:  # the user's bug comes back
                code = self.rng.choice(BY_NAME[job.bug].codes or (None,))
                delay = self.rng.randrange(300_000, 1_200_000)
                self._again(job, job.bug, code, self.rng.choice(nodes), delay, "bug_recurs")
        return out

    def _again(
        self, job: Job, scenario: str, code: int | str | None, node: str, delay: int, why: str
    ) -> None:
        again = Draw(self.now_ms + delay, scenario, code)
        self._at(again.at_ms, "incident", (again, Forced(job.job_id, job.attempt, node, why)))
