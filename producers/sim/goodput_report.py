"""The goodput report: one live run with the real engine, the baselines on the same
interruptions, and the sensitivity to decision latency and to false quarantines."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from producers.sim.goodput import (
    BASELINES,
    HOUR_MS,
    MINUTE_MS,
    baseline_stops,
    goodput,
    retimed,
    with_false_quarantines,
)
from producers.sim.goodput_run import START_MS, GoodputRun, RunConfig
from streams.policy import Policy

GPUS_PER_NODE = 8
LATENCIES_MS = (0, 1_000, 30_000, MINUTE_MS, 2 * MINUTE_MS, 5 * MINUTE_MS, 10 * MINUTE_MS,
                15 * MINUTE_MS, 30 * MINUTE_MS, 60 * MINUTE_MS)  # fmt: skip
FALSE_RATES = (0.0, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0)
LABELS = {
    "gpufailover": "gpufailover",
    "five_minute_service": "decide within 5 min",
    "naive_restart": "naive restart in place",
    "no_failover": "no failover (a person)",
}


@dataclass(frozen=True)
class Report:
    cfg: RunConfig
    data: dict[str, Any]


def build(cfg: RunConfig, policy: Policy, progress: Callable[[int], None] | None = None) -> Report:
    p, end = cfg.params, START_MS + cfg.horizon_ms
    live = GoodputRun(cfg, policy, progress).run()
    ratios = {"gpufailover": goodput(START_MS, end, retimed(live.stops, 0), p).ratio}
    hits = {"gpufailover": goodput(START_MS, end, retimed(live.stops, 0), p).stops}
    for name in BASELINES:
        g = goodput(START_MS, end, baseline_stops(name, live.interruptions, p, START_MS), p)
        ratios[name], hits[name] = g.ratio, g.stops
    latency = [
        (ms, goodput(START_MS, end, retimed(live.stops, ms - p.decision_latency_ms), p).ratio)
        for ms in LATENCIES_MS
    ]
    node_ms = cfg.nodes * cfg.horizon_ms
    false_curve = []
    for rate in FALSE_RATES:
        stops, n = with_false_quarantines(live.stops, rate, p)
        g = goodput(START_MS, end, stops, p)
        lost_node_ms = n * cfg.repair_ms
        # Per node-hour paid for: the job's nodes plus the healthy nodes kept out.
        fleet = g.useful_ms * cfg.nodes / (node_ms + lost_node_ms)
        false_curve.append((rate, g.ratio, fleet, n))
    decision_s = sorted(live.engine_decision_s)
    data: dict[str, Any] = {
        "nodes": cfg.nodes,
        "gpus": cfg.nodes * GPUS_PER_NODE,
        "spares": cfg.spares,
        "days": cfg.days,
        "seed": cfg.seed,
        "rate_per_node_hour": cfg.rate_per_node_hour,
        "params_min": {
            "checkpoint": p.checkpoint_ms / MINUTE_MS,
            "restart": p.restart_ms / MINUTE_MS,
            "decision_latency": p.decision_latency_ms / MINUTE_MS,
            "person": p.person_ms / MINUTE_MS,
            "naive_restart": p.naive_restart_ms / MINUTE_MS,
            "service_latency": p.service_latency_ms / MINUTE_MS,
            "repair_h": cfg.repair_ms / HOUR_MS,
        },
        "max_failovers": p.max_failovers,
        "interruptions": len(live.interruptions),
        "interruptions_by_class": _count(i.true_class for i in live.interruptions),
        "goodput": ratios,
        "hits": hits,
        "live": {
            "decisions": dict(sorted(live.decisions.items())),
            "wrong_decisions": sum(
                n
                for k, n in live.decisions.items()
                if k.split("->")[0] != k.split("->")[1].split("/")[0]
            ),
            "quarantines": dict(live.quarantines),
            "false_node_hours": live.false_node_hours,
            "person_restarts": live.person_restarts,
            "give_ups": live.give_ups,
            "secondary": dict(live.secondary),
            "waited_for_spares": live.waited_for_spares,
            "undecided": live.undecided,
            "engine_decision_s": {
                "n": len(decision_s),
                "p50": decision_s[len(decision_s) // 2] if decision_s else None,
                "max": decision_s[-1] if decision_s else None,
            },
        },
        "latency_sensitivity": latency,
        "false_quarantine_sensitivity": false_curve,
    }
    return Report(cfg, data)


def _count(items: Any) -> dict[str, int]:
    out: dict[str, int] = {}
    for x in items:
        out[x] = out.get(x, 0) + 1
    return dict(sorted(out.items()))


def text(r: Report) -> str:
    d = r.data
    pm = d["params_min"]
    lines = [
        f"goodput: one synchronous job on {d['nodes']} nodes ({d['gpus']:,} GPUs) + "
        f"{d['spares']} spares, {d['days']:g} simulated days, seed {d['seed']}",
        f"  {d['interruptions']} interruptions drawn "
        + ", ".join(f"{k} {n}" for k, n in d["interruptions_by_class"].items()),
        f"  checkpoint every {pm['checkpoint']:g} min, restart {pm['restart']:g} min, "
        f"decision latency {pm['decision_latency'] * 60:g} s, a person {pm['person']:g} min, "
        f"retry cap {d['max_failovers']}",
        "effective training time",
    ]
    for name in ("gpufailover", "five_minute_service", "naive_restart", "no_failover"):
        lines.append(
            f"  {LABELS[name]:<24} {d['goodput'][name] * 100:5.1f}%  "
            f"({d['hits'][name]} interruptions hit the job)"
        )
    lv = d["live"]
    quarantines = ", ".join(f"{k} {n}" for k, n in sorted(lv["quarantines"].items()))
    lines += [
        f"gpufailover's engine: {sum(lv['decisions'].values())} decisions, "
        f"{lv['wrong_decisions']} wrong; quarantines: {quarantines or 'none'}",
        f"  {lv['person_restarts']} restarts by a person ({lv['give_ups']} at the retry cap), "
        f"{lv['waited_for_spares']} waits for a spare node, {lv['undecided']} undecided",
        f"  {lv['false_node_hours']:.0f} healthy node-hours lost to false quarantines",
        "sensitivity to decision latency (gpufailover)",
        *_rows([f"{_dur(ms)} {g * 100:.1f}%" for ms, g in d["latency_sensitivity"]]),
        "sensitivity to extra false quarantines per non-hardware failure (per GPU-hour paid)",
        *_rows(
            [
                f"{rate * 100:g}% {fleet * 100:.1f}%"
                for rate, _, fleet, _ in d["false_quarantine_sensitivity"]
            ]
        ),
    ]
    return "\n".join(lines)


def _rows(items: list[str], per_row: int = 5) -> list[str]:
    return ["  " + ", ".join(items[k : k + per_row]) for k in range(0, len(items), per_row)]


def _dur(ms: int) -> str:
    if ms < MINUTE_MS:
        return f"{ms / 1000:g} s"
    return f"{ms / MINUTE_MS:g} min"
