"""A stand-in pipeline for broker-free tests of the simulator: it applies the mission's rules
to the sim's own truth (decides at the termination, quarantines on every hardware or
precursor signal, requeues at once). It tests the simulator, not the pipeline."""

from __future__ import annotations

from typing import Any

from producers.sim.bus import wall_ms
from producers.sim.config import SimConfig
from producers.sim.engine import SimEngine
from producers.sim.records import Out
from producers.sim.results import EttSnapshot, freeze_ett
from producers.sim.scenarios import CONDITION_CLASS, XID_CLASS
from producers.sim.truth import Seen, visible_verdict

STEP_MS = 5_000


class Oracle:
    """`from_records`: decide on what the records already published say (as a pipeline
    would, minus late evidence) instead of on the truth."""

    def __init__(self, engine: SimEngine, *, from_records: bool = False) -> None:
        self.engine = engine
        self.from_records = from_records
        self.quarantined: set[str] = set()
        self.requeues: list[dict[str, Any]] = []
        self.checkpoints: dict[str, dict[str, Any]] = {}
        self.published: list[Out] = []

    def feed(self, outs: list[Out]) -> None:
        pending = list(outs)
        while pending:
            out = pending.pop(0)
            self.published.append(out)
            pending += self.react(out)

    def react(self, out: Out) -> list[Out]:
        e, v = self.engine, out.value
        if out.incident is not None:
            out.incident.term_wall_ms = wall_ms()
        if out.topic == "gpu.xid" or out.topic == "gpu.health":
            if out.topic == "gpu.xid":
                cls = XID_CLASS.get(int(v["xid"]), "ignore")
            else:
                cls = CONDITION_CLASS[str(v["condition"])]
            node = v["node"]
            if cls in ("hardware", "precursor") and node not in self.quarantined:
                self.quarantined.add(node)
                record = {"node": node, "state": "quarantined", "reason": cls,
                          "ts_ms": v["ts_ms"], "job_id": None}  # fmt: skip
                return e.on_quarantine(record)
            return []
        if out.topic == "training.telemetry" and v["kind"] == "checkpoint":
            self.checkpoints[v["job_id"]] = {"step": v["step"], "uri": v["uri"]}
            return []
        if out.topic == "nodes.quarantine" and v["state"] == "released":
            self.quarantined.discard(v["node"])
            return e.on_quarantine(v)
        if out.topic == "jobs.events" and v["type"] == "terminated":
            return self.decide(v)
        if out.topic == "jobs.requeue":
            return e.on_requeue(v)
        return []

    def decide(self, v: dict[str, Any]) -> list[Out]:
        e = self.engine
        inc = e.by_attempt[(v["job_id"], v["attempt"])]
        verdict, suspects = inc.expected
        if self.from_records:
            signals = [s for n in inc.nodes for s in e.signals.get(n, ())]
            verdict, suspects = visible_verdict(inc, signals, e.cfg.lookback_ms, e.cfg.grace_ms)
        attempt = v["attempt"]
        if verdict in ("hardware", "transient"):
            action = (
                ("failover" if verdict == "hardware" else "retry") if attempt < 3 else "give_up"
            )
        else:
            action = "reject"
        seen = Seen(v["job_id"], attempt, verdict, action, suspects, (), wall_ms(), v["ts_ms"])
        outs = e.on_decision(seen)
        if action in ("failover", "retry"):
            job = e.book.jobs[v["job_id"]]
            boost = 100 if action == "failover" else 0
            cmd = {"job_id": job.job_id, "attempt": attempt, "next_attempt": attempt + 1,
                   "priority": job.priority + boost,
                   "checkpoint": self.checkpoints.get(job.job_id),
                   "exclude_nodes": sorted(set(suspects) | self.quarantined)}  # fmt: skip
            self.requeues.append(cmd)
            outs.append(Out("jobs.requeue", job.job_id, cmd))
        return outs


def run_offline(
    cfg: SimConfig, start_ms: int = 1_764_000_000_000, *, from_records: bool = False
) -> tuple[SimEngine, EttSnapshot, Oracle]:
    engine = SimEngine(cfg, start_ms)
    oracle = Oracle(engine, from_records=from_records)
    t = start_ms
    while t < engine.end_ms:
        t = min(t + STEP_MS, engine.end_ms)
        oracle.feed(engine.advance(t))
    ett = freeze_ett(engine, engine.end_ms)
    while t < engine.end_ms + 3_600_000:  # drain: let the last terminations happen
        t += STEP_MS
        oracle.feed(engine.advance(t))
    return engine, ett, oracle
