"""The report as one self-contained HTML file: inline SVG charts drawn here, no dependency.

Chart elements carry `class` / `data-series` attributes (bar, legend-entry, x-tick, plot-area,
broken-strip) so a browser test can find them in the rendered page."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from html import escape
from typing import Any

from producers.sim.report import checks, ms, pct

W, H = 640, 220
HOUR_MS = 3_600_000
COLORS = {"busy": "#2e7d32", "idle": "#b0bec5", "quarantined": "#c62828", "broken": "#6a1b9a"}
BAR = ("#1565c0", "#8e24aa", "#ef6c00")
# One colour per (verdict, action) the decision engine can emit (streams/engine/decide.py),
# keyed by name so a series keeps its colour whichever others a run had (Tableau 10, each once).
DECISION_COLORS = {
    "hardware/failover": "#4e79a7",
    "hardware/give_up": "#76b7b2",
    "hardware/fail": "#9c755f",
    "software/reject": "#b07aa1",
    "software/fail": "#ff9da7",
    "transient/retry": "#59a14f",
    "transient/give_up": "#edc948",
    "transient/fail": "#f28e2b",
    "unknown/reject": "#bab0ac",
    "unknown/fail": "#e15759",
}
UNLISTED_COLOR = "#37474f"  # a series no palette names (drawn, never dropped)
LEGEND_PX = 13
TICK_PX = 12
MAX_STEPS = 6  # time-axis intervals at most (4 h: hourly labels)
TICK_STEPS_H = (1 / 60, 5 / 60, 10 / 60, 15 / 60, 0.5, 1, 2, 3, 6, 12, 24, 48, 72, 168)
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


def _text(x: float, y: float, s: str, size: int = 11, anchor: str = "start", cls: str = "") -> str:
    attr = f' class="{cls}"' if cls else ""
    return (
        f'<text{attr} x="{x:.1f}" y="{y:.1f}" font-size="{size}" text-anchor="{anchor}">'
        f"{escape(s)}</text>"
    )


def bars(
    items: list[tuple[str, float]],
    fmt: str = "pct",
    w: int = 300,
    colors: Mapping[str, str] | None = None,
) -> str:
    """Vertical bars, one per (label, value); values 0..1 for pct. With `colors`, each bar's
    colour is looked up by its label; without, colours go by position."""
    h, top, base = 200, 20, 166
    top_v = max([v for _, v in items] + [1e-9]) if fmt != "pct" else 1.0
    slot = (w - 20) / max(1, len(items))
    out = [f'<line x1="10" y1="{base}" x2="{w - 10}" y2="{base}" stroke="#999"/>']
    for i, (label, v) in enumerate(items):
        bh = (base - top) * v / top_v
        x = 10 + i * slot + slot * 0.2
        color = BAR[i % len(BAR)] if colors is None else colors.get(label, UNLISTED_COLOR)
        out.append(
            f'<rect class="bar" data-series="{escape(label)}" x="{x:.1f}" y="{base - bh:.1f}" '
            f'width="{slot * 0.6:.1f}" height="{bh:.1f}" fill="{color}"/>'
        )
        shown = pct(v) if fmt == "pct" else f"{v:g}"
        out.append(_text(x + slot * 0.3, base - bh - 4, shown, 12, "middle"))
        for k, part in enumerate(label.split("/")):
            out.append(_text(x + slot * 0.3, base + 15 + 13 * k, part, 12, "middle"))
    return _svg("".join(out), w, h)


def time_ticks(span_ms: int) -> list[tuple[float, str]]:
    """(fraction of the time axis, label) at whole steps from 0, always ending at the end of
    the run (a last step too close to the end gives way to it)."""
    hours = max(span_ms, 1) / HOUR_MS
    step = next((s for s in TICK_STEPS_H if hours / s <= MAX_STEPS), hours / MAX_STEPS)
    marks = [k * step for k in range(int(hours / step + 1e-9) + 1)]
    if hours - marks[-1] > 1e-9:
        if len(marks) > 1 and hours - marks[-1] < 0.4 * step:
            marks.pop()
        marks.append(hours)
    return [(m / hours, _duration(m, hours)) for m in marks]


def _duration(hours: float, span_h: float) -> str:
    if span_h < 2:
        return f"{round(hours * 60, 1):g} min"
    if span_h <= 72:
        return f"{round(hours, 1):g} h"
    return f"{round(hours / 24, 1):g} d"


def _legend(entries: list[tuple[str, str, str]], x: float, y: float) -> str:
    """One row of (series, label, colour) swatches; spacing follows the label's length."""
    out: list[str] = []
    for series, label, color in entries:
        out.append(
            f'<g class="legend-entry" data-series="{escape(series)}">'
            f'<rect x="{x:.1f}" y="{y - LEGEND_PX + 2}" width="12" height="12" fill="{color}"/>'
            f"{_text(x + 17, y, label, LEGEND_PX)}</g>"
        )
        x += 17 + 0.6 * LEGEND_PX * len(label) + 22
    return "".join(out)


def fleet_chart(
    timeline: list[tuple[int, int, int, int, int]],
    start_ms: int,
    nodes: int,
    end_ms: int | None = None,
) -> str:
    """Stacked areas over simulated time: busy, idle, quarantined, broken and not quarantined;
    under them a strip with the broken count on its own scale (a node or two of a fleet is
    otherwise a sliver). The time axis runs from `start_ms` to `end_ms` (the end of the run;
    default the last sample) and is labelled up to that end."""
    if len(timeline) < 2:
        return "<p>(too short for a chart)</p>"
    end = timeline[-1][0] if end_ms is None else end_ms
    timeline = [row for row in timeline if start_ms <= row[0] <= end]
    if len(timeline) < 2:
        return "<p>(too short for a chart)</p>"
    left, right, top, base = 64, W - 24, 10, 150
    strip_top, strip_bottom = 160, 184
    span = max(1, end - start_ms)
    h = strip_bottom + 52

    def tx(t: int) -> float:
        return left + (right - left) * (t - start_ms) / span

    def xy(t: int, v: float) -> str:
        return f"{tx(t):.1f},{base - (base - top) * v / nodes:.1f}"

    out = [
        f'<rect class="plot-area" x="{left}" y="{top}" width="{right - left}" '
        f'height="{base - top}" fill="none" stroke="#ddd"/>'
    ]
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
        out.append(_text(left - 4, y + 4, f"{int(nodes * frac)}", TICK_PX, "end"))
    out.append(_broken_strip(timeline, tx, left, right, strip_top, strip_bottom))
    for frac, label in time_ticks(span):
        x = left + (right - left) * frac
        out.append(
            f'<line x1="{x:.1f}" y1="{strip_bottom}" x2="{x:.1f}" '
            f'y2="{strip_bottom + 4}" stroke="#999"/>'
        )
        out.append(_text(x, strip_bottom + 18, label, TICK_PX, "middle", cls="x-tick"))
    names = {"broken": "broken, not quarantined"}
    entries = [(n, names.get(n, n), COLORS[n]) for n in ("busy", "idle", "quarantined", "broken")]
    out.append(_legend(entries, left, h - 8))
    return _svg("".join(out), W, h)


def _broken_strip(
    timeline: list[tuple[int, int, int, int, int]],
    tx: Callable[[int], float],
    left: float,
    right: float,
    top: float,
    bottom: float,
) -> str:
    """Each sample with broken nodes as a bar to the next sample, scaled to the run's maximum."""
    most = max(row[4] for row in timeline)
    out = [
        f'<rect class="broken-strip" x="{left}" y="{top}" width="{right - left}" '
        f'height="{bottom - top}" fill="#eceff1"/>',
        _text(left - 4, top + 10, "broken", 11, "end"),
        _text(left - 4, bottom, f"max {most}", 10, "end"),
    ]
    for row, nxt in zip(timeline, [*timeline[1:], timeline[-1]], strict=True):
        if row[4] == 0:
            continue
        x0 = tx(row[0])
        width = max(2.0, tx(nxt[0]) - x0)
        bh = (bottom - top) * row[4] / most
        out.append(
            f'<rect class="broken-mark" x="{x0:.1f}" y="{bottom - bh:.1f}" width="{width:.1f}" '
            f'height="{bh:.1f}" fill="{COLORS["broken"]}"/>'
        )
    return "".join(out)


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
        out.append(_text(left - 6, y + 4, verdict, TICK_PX, "end"))
        out += [
            f'<circle cx="{x(v):.1f}" cy="{y}" r="3" fill="#1565c0" opacity="0.5"/>' for v in vs
        ]
    axis = 30 + 26 * len(rows)
    for label, v in (("10 ms", 10), ("100 ms", 100), ("1 s", 1e3), ("10 s", 1e4), ("100 s", 1e5)):
        out.append(
            f'<line x1="{x(v):.1f}" y1="15" x2="{x(v):.1f}" y2="{axis - 10}" stroke="#ddd"/>'
        )
        out.append(_text(x(v), axis + 6, label, TICK_PX, "middle"))
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
    chart = bars(va, fmt="n", w=max(320, 64 * len(va) + 20), colors=DECISION_COLORS)
    parts += ["<div><h2>Decisions (verdict/action)</h2>", chart, "</div></div>"]
    end_ms = start_ms + round(run["sim_hours"] * HOUR_MS)  # where the run stopped
    parts += [
        "<h2>Fleet over simulated time</h2>",
        fleet_chart(timeline, start_ms, s["fleet"]["nodes"], end_ms),
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
