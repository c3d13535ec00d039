"""The numbers of a run, from the engine's state: grading, quarantines, effective training time.

`freeze_ett` is taken when simulated time reaches the end of the run (before the drain that
waits for the last decisions), so the pipeline and the baselines are cut at the same instant.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

from producers.sim.effective import STRATEGIES, Ett, Hit, JobSpan, replay, run_segment
from producers.sim.engine import SimEngine
from producers.sim.truth import (
    Incident,
    classify_quarantine,
    grade,
    percentile,
    verdict_action_counts,
)

COVER_MS = 15 * 60_000  # a faulty node counts as caught if quarantined within this of the fault


@dataclass(frozen=True)
class EttSnapshot:
    horizon_ms: int
    pipeline: Ett
    baselines: dict[str, Ett]
    jobs: int
    hits: int


def freeze_ett(engine: SimEngine, horizon_ms: int) -> EttSnapshot:
    book, costs = engine.book, engine.cfg.costs
    last: dict[str, Any] = {}
    hits: list[Hit] = []
    for inc in engine.incidents:
        if inc.job_id is None or inc.term_ms is None or inc.onset_ms >= horizon_ms:
            continue
        if inc.term_ms <= horizon_ms:
            last[inc.job_id] = inc
        if inc.primary:
            hits.append(Hit(inc.job_id, inc.onset_ms, inc.term_ms, inc.true_class))
    spans: list[JobSpan] = []
    live = Ett(0, 0)
    for job in book.jobs.values():
        if job.first_start_ms is None or job.first_start_ms >= horizon_ms:
            continue
        spans.append(JobSpan(job.job_id, job.gpus, job.first_start_ms, job.work_ms))
        end = horizon_ms
        useful = book.useful_at(job, horizon_ms)
        final = last.get(job.job_id)
        if job.end_reason == "succeeded" and job.ended_ms is not None:
            end = job.ended_ms
        elif (
            final is not None
            and final.true_class == "software"
            and job.state
            in (
                "deciding",
                "ended",
            )
        ):
            end = final.term_ms  # the user's bug ends the job, in every strategy
        elif final is not None and job.state == "ended":
            # Stopped for good on a non-software failure (reject, retry cap): a person
            # restarts it after the MTTR, as without failover.
            restart = final.term_ms + costs.mttr_ms
            seg = run_segment(restart, horizon_ms, useful, job.work_ms, costs, failed=False)
            useful += seg.gain_ms
            end = seg.done_ms or horizon_ms
        held = max(0, min(end, horizon_ms) - job.first_start_ms)
        live += Ett(job.gpus * min(useful, held), job.gpus * held)
    baselines = {s: replay(s, spans, hits, horizon_ms, costs) for s in STRATEGIES}
    return EttSnapshot(horizon_ms, live, baselines, len(spans), len(hits))


def _covered(engine: SimEngine, node: str, onset: int) -> bool:
    repairs = [m.ts_ms for m in engine.marks.get(node, []) if m.kind == "repaired"]
    for q_node, q_ts, _, _ in engine.quarantines:
        if q_node != node or q_ts > onset + COVER_MS:
            continue
        if not any(q_ts < r <= onset for r in repairs):
            return True
    return False


def _resume(engine: SimEngine) -> dict[str, Any]:
    """Simulated minutes from a failure's termination to the next attempt's start."""
    vs = [r / 60_000 for j in engine.book.jobs.values() for r in j.resumes_ms]
    return {"n": len(vs), "p50": percentile(vs, 50), "p99": percentile(vs, 99)}


def _job_row(engine: SimEngine, job: Any) -> dict[str, Any]:
    s = engine.start_ms
    return {
        "job": job.job_id,
        "nodes": job.nodes_needed,
        "priority": job.priority,
        "state": job.state,
        "end": job.end_reason,
        "attempt": job.attempt,
        "first_start_min": (job.first_start_ms - s) / 60_000,
        "progress_min": job.progress_ms / 60_000,
        "resumes_min": [r / 60_000 for r in job.resumes_ms],
    }


def _incident_row(engine: SimEngine, inc: Incident) -> dict[str, Any]:
    s = engine.start_ms
    return {
        "id": inc.incident_id,
        "scenario": inc.scenario,
        "class": inc.true_class,
        "job": inc.job_id,
        "attempt": inc.attempt,
        "nodes": len(inc.nodes),
        "faulty": inc.faulty_node,
        "onset_min": round((inc.onset_ms - s) / 60_000, 2),
        "term_min": None if inc.term_ms is None else round((inc.term_ms - s) / 60_000, 2),
        "reason": inc.reason,
        "flags": list(inc.flags),
        "primary": inc.primary,
    }


def summarize(engine: SimEngine, ett: EttSnapshot | None, alerts: Counter[str]) -> dict[str, Any]:
    cfg = engine.cfg
    g = grade(engine.incidents, engine.decisions, engine.signals, cfg.lookback_ms, cfg.grace_ms)
    kinds: Counter[str] = Counter()
    false_q: list[dict[str, Any]] = []
    for node, ts, reason, job in engine.quarantines:
        kind = classify_quarantine(engine.marks.get(node, []), ts)
        kinds[kind] += 1
        if kind == "false":
            false_q.append({"node": node, "ts_ms": ts, "reason": reason, "job": job})
    faulty = [i for i in engine.incidents if i.faulty_node and i.onset_ms <= engine.now_ms]
    caught = sum(_covered(engine, i.faulty_node or "", i.onset_ms) for i in faulty)
    lat_all = [v for vs in g.latencies_ms.values() for v in vs]
    latency = {
        name: {"n": len(vs), "p50_ms": percentile(vs, 50), "p99_ms": percentile(vs, 99)}
        for name, vs in [("all", lat_all), *sorted(g.latencies_ms.items())]
    }
    out: dict[str, Any] = {
        "fleet": {"nodes": cfg.nodes, "gpus": cfg.nodes * 8, "lemons": sorted(engine.lemons)},
        "incidents": {
            "total": len(engine.incidents),
            "by_scenario": dict(Counter(i.scenario for i in engine.incidents).most_common()),
            "flags": dict(Counter(f for i in engine.incidents for f in i.flags).most_common()),
            "secondary": sum(not i.primary for i in engine.incidents),
            "skipped": dict(Counter(engine.skipped)),
            "lemon_failures": dict(
                Counter(i.faulty_node for i in engine.incidents if "lemon" in i.flags)
            ),
        },
        "decisions": {
            "total": len(engine.decisions),
            "by_verdict_action": {
                f"{v}/{a}": n
                for (v, a), n in sorted(verdict_action_counts(engine.decisions).items())
            },
            "job_incidents": g.job_incidents,
            "decided": g.decided,
            "missing": g.missing,
            "duplicated": g.duplicated,
            "stray": g.stray_decisions,
        },
        "accuracy": {
            "graded": g.graded,
            "correct": g.correct,
            "accuracy": g.accuracy,
            "by_scenario": {
                k: {"correct": c, "graded": n} for k, (c, n) in sorted(g.by_scenario.items())
            },
            "wrong": g.wrong,
            "false_evidence_cases": g.false_evidence,
        },
        "quarantines": {
            "total": len(engine.quarantines),
            "justified": kinds["justified"],
            "known_false_evidence": kinds["known_false_evidence"],
            "false": kinds["false"],
            "false_list": false_q,
            "faulty_nodes_caught": caught,
            "faulty_nodes": len(faulty),
        },
        "resume_min": _resume(engine),
        "checkpoints": {
            "requeues": len(engine.checkpoints),
            "carried_right": sum(
                carried == expected or (carried is None and expected == 0)
                for expected, carried in engine.checkpoints
            ),
        },
        "jobs": [_job_row(engine, j) for j in engine.book.jobs.values() if j.first_start_ms],
        "incident_list": [_incident_row(engine, i) for i in engine.incidents],
        "latency_ms": latency,
        "latency_samples": {k: sorted(v) for k, v in g.latencies_ms.items()},
        "alerts": dict(alerts),
    }
    if ett is not None:
        out["effective_training_time"] = {
            "horizon_ms": ett.horizon_ms,
            "jobs": ett.jobs,
            "hits": ett.hits,
            "pipeline": ett.pipeline.ratio,
            **{name: e.ratio for name, e in ett.baselines.items()},
            "gpu_hours": {
                "pipeline": [ett.pipeline.useful_gpu_ms / 3.6e6, ett.pipeline.held_gpu_ms / 3.6e6],
                **{
                    name: [e.useful_gpu_ms / 3.6e6, e.held_gpu_ms / 3.6e6]
                    for name, e in ett.baselines.items()
                },
            },
            "costs": {
                "mttr_min": cfg.costs.mttr_ms / 60_000,
                "restart_min": cfg.costs.restart_ms / 60_000,
                "checkpoint_min": cfg.costs.checkpoint_ms / 60_000,
                "naive_restart_min": cfg.costs.naive_restart_ms / 60_000,
            },
        }
    return out
