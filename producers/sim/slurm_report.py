"""The Slurm demo's report: the pipeline's decisions graded against the sim's ground truth, and
what Slurm really did (nodes drained with our reason, jobs requeued with the same JobId)."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime
from typing import Any

from producers.sim.slurm_fleet import SlurmFleet, incident_summary
from producers.sim.truth import classify_quarantine, grade, percentile, verdict_action_counts


def summarize(
    fleet: SlurmFleet, stats: dict[str, Any], lookback_ms: int, grace_ms: int
) -> dict[str, Any]:
    g = grade(fleet.incidents, fleet.decisions, fleet.signals, lookback_ms, grace_ms)
    kinds = Counter(classify_quarantine(fleet.marks.get(n, []), ts) for n, ts in fleet.quarantines)
    quarantined = sorted({n for n, _ in fleet.quarantines})
    drained = sorted(fleet.drained_seen)
    failovers = fleet.failovers()
    requeued = [d for d in failovers if (d.job_id, d.attempt) in fleet.requeued]
    excluded = [
        d for d in requeued if set(d.suspects) <= set(fleet.requeued[(d.job_id, d.attempt)])
    ]
    ran = [d for d in failovers if (d.job_id, d.attempt) in fleet.ran_again]
    on_suspect = [d for d in ran if set(d.suspects) & set(fleet.ran_again[(d.job_id, d.attempt)])]
    hardware = [i for i in fleet.incidents if i.true_class == "hardware" and i.faulty_node]
    caught = [
        i
        for i in hardware
        if any(n == i.faulty_node and ts >= i.onset_ms - 10_000 for n, ts in fleet.quarantines)
    ]
    latencies = [v for vs in g.latencies_ms.values() for v in vs]
    flags = Counter(f for i in fleet.incidents for f in i.flags)
    return {
        "scheduler": "slurm",
        "run": stats | {"finished": datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")},
        "fleet": {"nodes": list(fleet.nodes), "jobs_submitted": stats.get("submitted", 0)},
        "incidents": {
            "total": len(fleet.incidents),
            "by_scenario": incident_summary(fleet),
            "flags": dict(sorted(flags.items())),
        },
        "decisions": {
            "total": len(fleet.decisions),
            "job_incidents": g.job_incidents,
            "missing": g.missing,
            "duplicated": g.duplicated,
            "stray": g.stray_decisions,
            "by_verdict_action": {
                f"{v}->{a}": n for (v, a), n in verdict_action_counts(fleet.decisions).items()
            },
        },
        "accuracy": {
            "correct": g.correct,
            "graded": g.graded,
            "accuracy": g.accuracy,
            "wrong": g.wrong,
            "false_evidence": g.false_evidence,
        },
        "quarantines": {
            "total": len(fleet.quarantines),
            "justified": kinds["justified"],
            "known_false_evidence": kinds["known_false_evidence"],
            "false": kinds["false"],
            "nodes": quarantined,
            "faulty_caught": len(caught),
            "faulty": len(hardware),
        },
        "slurm": {
            "drained_nodes": drained,
            "drained_match_quarantines": drained == quarantined,
            "failovers": len(failovers),
            "requeued": len(requeued),
            "requeued_excluding_suspects": len(excluded),
            "ran_again": len(ran),
            "ran_again_on_a_suspect": len(on_suspect),
            "requeue_commands": stats.get("requeue_commands", 0),
        },
        "latency_ms": {"p50": percentile(latencies, 50), "p99": percentile(latencies, 99)},
        "incident_list": [
            {
                "incident": i.incident_id,
                "scenario": i.scenario,
                "job": i.job_id,
                "attempt": i.attempt,
                "nodes": list(i.nodes),
                "faulty": i.faulty_node,
                "term_ms": i.term_ms,
                "signals": [
                    [x.ts_ms, x.node, x.kind, x.code, x.part]
                    for n in i.nodes
                    for x in fleet.signals.get(n, [])
                    if i.term_ms is not None and i.term_ms - 60_000 <= x.ts_ms <= i.term_ms + 60_000
                ],
            }
            for i in fleet.incidents
        ],
        "decision_list": [
            {
                "job": d.job_id,
                "attempt": d.attempt,
                "verdict": d.verdict,
                "action": d.action,
                "suspects": list(d.suspects),
                "evidence": [list(e) for e in d.evidence],
                "decided_ts_ms": d.decided_ts_ms,
            }
            for d in fleet.decisions
        ],
    }


def checks(s: dict[str, Any]) -> list[tuple[str, bool]]:
    """The run's pass/fail lines (the integration test asserts the same)."""
    d, a, q, sl = s["decisions"], s["accuracy"], s["quarantines"], s["slurm"]
    return [
        ("every job failure got exactly one decision", not d["missing"] and not d["duplicated"]),
        ("accuracy against ground truth >= 95%", a["accuracy"] >= 0.95),
        ("no healthy node quarantined (outside known false-evidence cases)", q["false"] == 0),
        ("the nodes drained in Slurm are the quarantined nodes", sl["drained_match_quarantines"]),
        (
            "every failover requeued in Slurm (same JobId) with its suspects excluded",
            sl["requeued"] == sl["requeued_excluding_suspects"] == sl["failovers"],
        ),
        ("no requeued job ran again on a suspect node", sl["ran_again_on_a_suspect"] == 0),
    ]


def render(s: dict[str, Any]) -> str:
    run, inc, d, a, q, sl = (
        s["run"], s["incidents"], s["decisions"], s["accuracy"], s["quarantines"], s["slurm"]
    )  # fmt: skip
    nodes = s["fleet"]["nodes"]
    stopped = run.get("stopped")
    lat = s["latency_ms"]
    lines = [
        "gpufailover demo report, on Slurm"
        + (f" (partial: the run was stopped early, {stopped})" if stopped else ""),
        "=================================",
        f"fleet      {len(nodes)} slurmd ({', '.join(nodes)}) x 8 GPUs, "
        f"{s['fleet']['jobs_submitted']} training jobs submitted with sbatch",
        f"run        {run['wall_s']:.0f} s wall in real time (seed {run['seed']}, "
        f"drain {run['drain_s']:.1f} s), topics {run['prefix']}*",
        "",
        f"incidents  {inc['total']} injected (XID/health on the node topics, job killed in Slurm)",
    ]
    lines += [f"  {name:<18} {n}" for name, n in inc["by_scenario"].items()]
    flags = ", ".join(f"{k} {v}" for k, v in inc["flags"].items()) or "-"
    verdicts = ", ".join(f"{k} {v}" for k, v in sorted(d["by_verdict_action"].items())) or "-"
    match = (
        "= the quarantined nodes"
        if sl["drained_match_quarantines"]
        else "quarantined: " + (", ".join(q["nodes"]) or "-")
    )
    lines += [
        f"  hard cases: {flags}",
        "",
        f"decisions  {d['total']} for {d['job_incidents']} job failures "
        f"(missing {len(d['missing'])}, duplicated {len(d['duplicated'])}, stray {d['stray']})",
        f"  {verdicts}",
        f"accuracy   {a['correct']}/{a['graded']} = {100 * a['accuracy']:.1f}%"
        + (
            f" ({len(a['false_evidence'])} known false-evidence case(s) graded apart)"
            if a["false_evidence"]
            else ""
        ),
        f"quarantines {q['total']}: justified {q['justified']}, known false evidence "
        f"{q['known_false_evidence']}, FALSE {q['false']}; faulty nodes caught "
        f"{q['faulty_caught']}/{q['faulty']}",
        f"slurm drained {len(sl['drained_nodes'])} node(s) with our reason: "
        f"{', '.join(sl['drained_nodes']) or '-'} "
        f"({match})",
        f"slurm requeued {sl['requeued']}/{sl['failovers']} failovers (same JobId, Restarts+1), "
        f"suspects excluded {sl['requeued_excluding_suspects']}, running again "
        f"{sl['ran_again']} (on a suspect {sl['ran_again_on_a_suspect']})",
        "decision latency (kill -> decision, through slurmctld's epilog) "
        + (f"p50 {lat['p50']:.0f} ms / p99 {lat['p99']:.0f} ms" if lat["p50"] is not None else "-"),
    ]
    alerts = ", ".join(f"{k} {v}" for k, v in sorted(run.get("alerts", {}).items()))
    lines.append(f"alerts     {alerts or 'none'}")
    for row in a["wrong"]:
        lines.append(f"  WRONG {row}")
    lines += ["", "checks"]
    lines += [f"  [{'ok' if ok else 'FAIL'}] {text}" for text, ok in checks(s)]
    return "\n".join(lines)
