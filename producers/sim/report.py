"""The end-of-run report as text (the HTML version is `producers.sim.html`)."""

from __future__ import annotations

from typing import Any


def pct(x: float | None) -> str:
    return "-" if x is None else f"{x:.1%}"


def ms(x: float | None) -> str:
    if x is None:
        return "-"
    return f"{x:.0f} ms" if x < 10_000 else f"{x / 1000:.1f} s"


def plural(n: int, word: str, many: str | None = None) -> str:
    """`1 case`, `2 cases` (`many` where the plural is not word + s)."""
    return f"{n} {word if n == 1 else (many or word + 's')}"


def checks(s: dict[str, Any]) -> list[tuple[str, bool]]:
    """The run's pass/fail lines (the integration test asserts the same)."""
    d, a, q = s["decisions"], s["accuracy"], s["quarantines"]
    out = [
        ("every job failure got exactly one decision", not d["missing"] and not d["duplicated"]),
        ("accuracy against ground truth >= 95%", a["accuracy"] >= 0.95),
        ("no healthy node quarantined (outside known false-evidence cases)", q["false"] == 0),
    ]
    ett = s.get("effective_training_time")
    if ett is not None:
        better = ett["pipeline"] > max(ett["no_failover"], ett["naive_restart"])
        out.append(("effective training time above both baselines", better))
    return out


def render(s: dict[str, Any]) -> str:
    run, inc, d, a, q = s["run"], s["incidents"], s["decisions"], s["accuracy"], s["quarantines"]
    stopped = run.get("stopped")
    lines = [
        "gpufailover demo report"
        + (f" (partial: the run was stopped early, {stopped})" if stopped else ""),
        "=======================",
        f"fleet      {s['fleet']['nodes']} nodes x 8 GPUs = {s['fleet']['gpus']} GPUs, "
        f"lemon nodes {', '.join(s['fleet']['lemons'])}",
        f"run        {run['sim_hours']:.1f} simulated hours in {run['wall_s']:.0f} s wall "
        f"(time x{run['time_scale']:g}, seed {run['seed']}, drain {run['drain_s']:.1f} s), "
        f"topics {run['prefix']}*",
        "",
        f"incidents  {inc['total']} injected "
        f"({plural(inc['secondary'], 'follow-up')} of earlier outcomes)",
    ]
    lines += [f"  {name:<18} {n}" for name, n in inc["by_scenario"].items()]
    flags = ", ".join(f"{k} {v}" for k, v in inc["flags"].items()) or "-"
    lines += [f"  hard cases: {flags}"]
    if inc["lemon_failures"]:
        lemons = ", ".join(f"{k} x{v}" for k, v in inc["lemon_failures"].items())
        lines.append(f"  lemon failures: {lemons}")
    lines += [
        "",
        f"decisions  {d['total']} for {d['job_incidents']} job failures "
        f"(missing {len(d['missing'])}, duplicated {len(d['duplicated'])}, stray {d['stray']})",
    ]
    lines += [f"  {k:<22} {n}" for k, n in d["by_verdict_action"].items()]
    lines += [
        "",
        f"accuracy   {a['correct']}/{a['graded']} = {pct(a['accuracy'])} "
        f"(verdict and suspect nodes vs the sim's ground truth; "
        f"{plural(len(a['false_evidence_cases']), 'known false-evidence case')} graded apart)",
    ]
    for row in a["wrong"][:10]:
        lines.append(
            f"  WRONG #{row['incident']} {row['scenario']} {row['job']}/{row['attempt']}: "
            f"expected {row['expected']}, got {row['got']}"
        )
    for row in a["false_evidence_cases"][:5]:
        lines.append(
            f"  false evidence #{row['incident']} {row['scenario']}: truth {row['expected']}, "
            f"the records said {row['visible']}, pipeline {row['got']}"
        )
    lines += [
        "",
        f"quarantines {q['total']}: justified {q['justified']}, known false evidence "
        f"{q['known_false_evidence']}, FALSE {q['false']}; faulty nodes caught "
        f"{q['faulty_nodes_caught']}/{q['faulty_nodes']}",
    ]
    lines += [f"  false: {row}" for row in q["false_list"][:5]]
    lines += ["", "decision latency (wall clock, termination published -> decision read)"]
    for name, v in s["latency_ms"].items():
        lines.append(
            f"  {name:<10} n={v['n']:<4} p50 {ms(v['p50_ms']):>9}   p99 {ms(v['p99_ms']):>9}"
        )
    r, ck = s["resume_min"], s["checkpoints"]
    if r["n"]:
        lines += [
            f"time to resume (simulated, termination -> next attempt running): "
            f"p50 {r['p50']:.1f} min, p99 {r['p99']:.1f} min over {r['n']} restarts",
        ]
    lines.append(
        f"requeues carrying the job's last checkpoint: {ck['carried_right']}/{ck['requeues']}"
    )
    ett = s.get("effective_training_time")
    if ett is not None:
        c = ett["costs"]
        lines += [
            "",
            "effective training time (useful GPU-time / GPU-time held; "
            f"{plural(ett['jobs'], 'job')}; every strategy replays the trace's "
            f"{plural(ett['hits'], 'injected job failure')}, "
            "not the follow-ups of the pipeline's own outcomes)",
            f"  pipeline            {pct(ett['pipeline'])}",
            f"  no failover         {pct(ett['no_failover'])}   (a person restarts after "
            f"{c['mttr_min']:.0f} min)",
            f"  naive restart       {pct(ett['naive_restart'])}   (same nodes after "
            f"{c['naive_restart_min']:.0f} min; broken hardware waits for the person)",
            f"  (start-up {c['restart_min']:.0f} min per attempt, checkpoint every "
            f"{c['checkpoint_min']:.0f} min)",
        ]
    if s["alerts"]:
        lines += ["", "alerts     " + ", ".join(f"{k} {v}" for k, v in s["alerts"].items())]
    lines += [""] + [f"[{'PASS' if ok else 'FAIL'}] {text}" for text, ok in checks(s)]
    return "\n".join(lines)
