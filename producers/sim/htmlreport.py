"""The report as one self-contained HTML file: inline SVG charts drawn here, no dependency."""

from __future__ import annotations

from html import escape
from typing import Any

from producers.sim.report import checks, ms, pct

W, H = 640, 220
COLORS = {"busy": "#2e7d32", "idle": "#b0bec5", "quarantined": "#c62828", "broken": "#f9a825"}
BAR = ("#1565c0", "#8e24aa", "#ef6c00")
CSS = """
body{font-family:system-ui,sans-serif;margin:24px auto;max-width:980px;color:#222}
h1{font-size:22px}h2{font-size:17px;margin-top:28px;border-bottom:1px solid #ddd}
table{border-collapse:collapse;font-size:13px}td,th{padding:3px 10px;text-align:left}
tr:nth-child(even){background:#f5f5f5}.pass{color:#2e7d32}.fail{color:#c62828}
.grid{display:grid;grid-template-columns:1fr 1fr;gap:16px}svg{background:#fafafa}
.kpi{display:inline-block;margin:4px 18px 4px 0}.kpi b{font-size:20px;display:block}
"""


def _svg(body: str, w: int = W, h: int = H) -> str:
    return f'<svg width="{w}" height="{h}" viewBox="0 0 {w} {h}" xmlns="http://www.w3.org/2000/svg">{body}</svg>'


def _text(x: float, y: float, s: str, size: int = 11, anchor: str = "start") -> str:
    return (
        f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size}" text-anchor="{anchor}">'
        f"{escape(s)}</text>"
    )


def bars(items: list[tuple[str, float]], fmt: str = "pct", w: int = 300) -> str:
    """Vertical bars, one per (label, value); values 0..1 for pct."""
    h, top, base = 200, 20, 170
    top_v = max([v for _, v in items] + [1e-9]) if fmt != "pct" else 1.0
    slot = (w - 20) / max(1, len(items))
    out = [f'<line x1="10" y1="{base}" x2="{w - 10}" y2="{base}" stroke="#999"/>']
    for i, (label, v) in enumerate(items):
        bh = (base - top) * v / top_v
        x = 10 + i * slot + slot * 0.2
        color = BAR[i % len(BAR)]
        out.append(
            f'<rect x="{x:.1f}" y="{base - bh:.1f}" width="{slot * 0.6:.1f}" '
            f'height="{bh:.1f}" fill="{color}"/>'
        )
        shown = pct(v) if fmt == "pct" else f"{v:g}"
        out.append(_text(x + slot * 0.3, base - bh - 4, shown, 12, "middle"))
        for k, part in enumerate(label.split("/")):
            out.append(_text(x + slot * 0.3, base + 14 + 12 * k, part, 11, "middle"))
    return _svg("".join(out), w, h)


def fleet_chart(timeline: list[tuple[int, int, int, int, int]], start_ms: int, nodes: int) -> str:
    """Stacked areas over simulated time: busy, idle, quarantined (+ broken, not quarantined)."""
    if len(timeline) < 2:
        return "<p>(too short for a chart)</p>"
    left, right, top, base = 40, W - 10, 10, H - 30
    t0, t1 = timeline[0][0], timeline[-1][0]
    span = max(1, t1 - t0)

    def xy(t: int, v: float) -> str:
        return (
            f"{left + (right - left) * (t - t0) / span:.1f},{base - (base - top) * v / nodes:.1f}"
        )

    out: list[str] = []
    layers = (("busy", 1), ("quarantined", 3), ("broken", 4), ("idle", 2))
    below = [0.0] * len(timeline)
    for name, idx in layers:
        above = [b + row[idx] for b, row in zip(below, timeline, strict=True)]
        pts = [xy(r[0], a) for r, a in zip(timeline, above, strict=True)]
        pts += [xy(r[0], b) for r, b in reversed(list(zip(timeline, below, strict=True)))]
        out.append(f'<polygon points="{" ".join(pts)}" fill="{COLORS[name]}" opacity="0.9"/>')
        below = above
    for frac in (0, 0.5, 1):
        y = base - (base - top) * frac
        out.append(_text(left - 4, y + 4, f"{int(nodes * frac)}", 10, "end"))
    hours = span / 3.6e6
    for k in range(int(hours) + 1):
        t = t0 + int(k * 3.6e6)
        x = left + (right - left) * (t - t0) / span
        out.append(_text(x, base + 14, f"{(t - start_ms) / 3.6e6:.0f} h", 10, "middle"))
    lx = left
    for name, _ in layers:
        out.append(f'<rect x="{lx}" y="{H - 12}" width="10" height="10" fill="{COLORS[name]}"/>')
        out.append(_text(lx + 14, H - 3, name, 10))
        lx += 90
    return _svg("".join(out))


def latency_chart(samples: dict[str, list[float]]) -> str:
    """Each decision's latency (log scale, ms), one row per verdict."""
    rows = [(k, v) for k, v in sorted(samples.items()) if v]
    if not rows:
        return "<p>(no decisions)</p>"
    left, right = 80, W - 20
    lo, hi = 1.0, 5.0  # 10 ms .. 100 s
    h = 30 + 26 * len(rows) + 20
    out: list[str] = []

    def x(v: float) -> float:
        from math import log10

        return left + (right - left) * (min(max(log10(max(v, 10.0)), lo), hi) - lo) / (hi - lo)

    for i, (verdict, vs) in enumerate(rows):
        y = 30 + 26 * i
        out.append(_text(left - 6, y + 4, verdict, 11, "end"))
        out += [
            f'<circle cx="{x(v):.1f}" cy="{y}" r="3" fill="#1565c0" opacity="0.5"/>' for v in vs
        ]
    axis = 30 + 26 * len(rows)
    for label, v in (("10 ms", 10), ("100 ms", 100), ("1 s", 1e3), ("10 s", 1e4), ("100 s", 1e5)):
        out.append(
            f'<line x1="{x(v):.1f}" y1="15" x2="{x(v):.1f}" y2="{axis - 10}" stroke="#ddd"/>'
        )
        out.append(_text(x(v), axis + 4, label, 10, "middle"))
    return _svg("".join(out), W, h)


def _table(header: list[str], rows: list[list[Any]]) -> str:
    head = "".join(f"<th>{escape(h)}</th>" for h in header)
    body = "".join(
        "<tr>" + "".join(f"<td>{escape(str(c))}</td>" for c in row) + "</tr>" for row in rows
    )
    return f"<table><tr>{head}</tr>{body}</table>"


def render(s: dict[str, Any], timeline: list[tuple[int, int, int, int, int]], start_ms: int) -> str:
    run, a, q, d = s["run"], s["accuracy"], s["quarantines"], s["decisions"]
    ett = s.get("effective_training_time")
    parts = [
        f"<h1>gpufailover demo: {s['fleet']['nodes']} nodes, "
        f"{run['sim_hours']:.1f} simulated hours</h1>",
        f"<p>seed {run['seed']}, time x{run['time_scale']:g}, {run['wall_s']:.0f} s wall, "
        f"topics <code>{escape(run['prefix'])}*</code>, generated {escape(run['finished'])}</p>",
        "<div>",
        f'<span class="kpi"><b>{pct(a["accuracy"])}</b>'
        f"accuracy ({a['correct']}/{a['graded']})</span>",
        f'<span class="kpi"><b>{d["decided"]}/{d["job_incidents"]}</b>failures decided</span>',
        f'<span class="kpi"><b>{q["false"]}</b>false quarantines</span>',
        f'<span class="kpi"><b>{ms(s["latency_ms"]["all"]["p50_ms"])}</b>latency p50</span>',
    ]
    if ett:
        parts.append(
            f'<span class="kpi"><b>{pct(ett["pipeline"])}</b>effective training time</span>'
        )
    parts.append("</div><ul>")
    for text, ok in checks(s):
        parts.append(
            f'<li class="{"pass" if ok else "fail"}">'
            f"{'PASS' if ok else 'FAIL'}: {escape(text)}</li>"
        )
    parts.append("</ul><div class='grid'>")
    if ett:
        items = [("pipeline", ett["pipeline"]), ("no failover", ett["no_failover"]),
                 ("naive restart", ett["naive_restart"])]  # fmt: skip
        parts += ["<div><h2>Effective training time</h2>", bars(items), "</div>"]
    va = [(k, float(n)) for k, n in d["by_verdict_action"].items()]
    parts += ["<div><h2>Decisions (verdict/action)</h2>", bars(va, fmt="n", w=320), "</div></div>"]
    parts += [
        "<h2>Fleet over simulated time</h2>",
        fleet_chart(timeline, start_ms, s["fleet"]["nodes"]),
    ]
    parts += ["<h2>Decision latency (wall clock)</h2>", latency_chart(s.get("latency_samples", {}))]
    lat_rows = [[k, v["n"], ms(v["p50_ms"]), ms(v["p99_ms"])] for k, v in s["latency_ms"].items()]
    parts.append(_table(["verdict", "n", "p50", "p99"], lat_rows))
    parts.append("<h2>Accuracy by scenario</h2>")
    acc_rows = [[k, v["correct"], v["graded"]] for k, v in a["by_scenario"].items()]
    parts.append(_table(["scenario", "correct", "graded"], acc_rows))
    if a["wrong"] or a["false_evidence_cases"]:
        parts.append("<h2>Wrong decisions and known false-evidence cases</h2>")
        rows = [[r["incident"], r["scenario"], r["job"], r["expected"], r["visible"], r["got"]]
                for r in a["wrong"] + a["false_evidence_cases"]]  # fmt: skip
        parts.append(_table(["#", "scenario", "job", "truth", "records said", "pipeline"], rows))
    parts.append("<h2>Incidents injected</h2>")
    parts.append(
        _table(["scenario", "count"], [[k, v] for k, v in s["incidents"]["by_scenario"].items()])
    )
    parts.append(
        f"<p>quarantines {q['total']}: justified {q['justified']}, known false evidence "
        f"{q['known_false_evidence']}, false {q['false']}; faulty nodes caught "
        f"{q['faulty_nodes_caught']}/{q['faulty_nodes']}</p>"
    )
    body = "\n".join(parts)
    return (
        "<!doctype html><html><head><meta charset='utf-8'><title>gpufailover demo report</title>"
        f"<style>{CSS}</style></head><body>{body}</body></html>\n"
    )
