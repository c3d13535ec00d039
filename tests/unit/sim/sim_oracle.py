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
from producers.sim.truth import Seen

STEP_MS = 5_000


class Oracle:
    def __init__(self, engine: SimEngine) -> None:
        self.engine = engine
        self.quarantined: set[str] = set()
        self.requeues: list[dict[str, Any]] = []

    def feed(self, outs: list[Out]) -> None:
        pending = list(outs)
        while pending:
            out = pending.pop(0)
            pending += self.react(out)

    def react(self, out: Out) -> list[Out]:
        e, v = self.engine, out.value
        if out.incident is not None:
            out.incident.term_wall_ms = wall_ms()
        if out.topic == "gpu.xid" or out.topic == "gpu.health":
            code = v.get("xid", v.get("condition"))
            cls = XID_CLASS.get(code, "ignore") if out.topic == "gpu.xid" else CONDITION_CLASS[code]
            node = v["node"]
            if cls in ("hardware", "precursor") and node not in self.quarantined:
                self.quarantined.add(node)
                record = {"node": node, "state": "quarantined", "reason": cls,
                          "ts_ms": v["ts_ms"], "job_id": None}  # fmt: skip
                return e.on_quarantine(record)
            return []
        if out.topic == "nodes.quarantine" and v["state"] == "released":
            self.quarantined.discard(v["node"])
            return e.on_quarantine(v)
        if out.topic == "jobs.events" and v["type"] == "terminated":
            return self.decide(v)
        return []

    def decide(self, v: dict[str, Any]) -> list[Out]:
        e = self.engine
        inc = e.by_attempt[(v["job_id"], v["attempt"])]
        verdict, suspects = inc.expected
        attempt = v["attempt"]
        if verdict in ("hardware", "transient"):
            action = ("failover" if verdict == "hardware" else "retry") if attempt < 3 else "give_up"
        else:
            action = "reject"
        seen = Seen(v["job_id"], attempt, verdict, action, suspects, (), wall_ms(), v["ts_ms"])
        outs = e.on_decision(seen)
        if action in ("failover", "retry"):
            job = e.book.jobs[v["job_id"]]
            boost = 100 if action == "failover" else 0
            cmd = {"job_id": job.job_id, "attempt": attempt, "next_attempt": attempt + 1,
                   "priority": job.priority + boost,
                   "exclude_nodes": sorted(set(suspects) | self.quarantined)}  # fmt: skip
            self.requeues.append(cmd)
            outs += e.on_requeue(cmd)
        return outs


def run_offline(cfg: SimConfig, start_ms: int = 1_764_000_000_000) -> tuple[SimEngine, EttSnapshot, Oracle]:
    engine = SimEngine(cfg, start_ms)
    oracle = Oracle(engine)
    t = start_ms
    while t < engine.end_ms:
        t = min(t + STEP_MS, engine.end_ms)
        oracle.feed(engine.advance(t))
    ett = freeze_ett(engine, engine.end_ms)
    while t < engine.end_ms + 3_600_000:  # drain: let the last terminations happen
        t += STEP_MS
        oracle.feed(engine.advance(t))
    return engine, ett, oracle
