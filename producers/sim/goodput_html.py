"""The goodput report as one self-contained HTML page: the four strategies as bars, and two
small line charts (sensitivity to decision latency and to false quarantines)."""

from __future__ import annotations

import math
from html import escape
from typing import Any

from producers.sim.goodput_report import LABELS, Report, text
from producers.sim.htmlreport import CSS, _svg, _text

W, H = 460, 240
LEFT, RIGHT, TOP, BASE = 52, W - 16, 16, H - 44
STRATEGY_COLORS = {
    "gpufailover": "#2e7d32",
    "five_minute_service": "#1565c0",
    "naive_restart": "#ef6c00",
    "no_failover": "#8e24aa",
}

SHORT = {
    "gpufailover": ("gpufailover",),
    "five_minute_service": ("decide within", "5 minutes"),
    "naive_restart": ("naive restart", "in place"),
    "no_failover": ("no failover", "(a person)"),
}


def _y_range(values: list[float]) -> tuple[float, float]:
    """Percent axis bounds around the values, in steps of 5 points."""
    low = math.floor(min(values) * 20) / 20
    high = math.ceil(max(values) * 20) / 20
    return low, high if high > low else low + 0.05


def _axes(low: float, high: float, x_label: str) -> list[str]:
    out = [
        f'<line x1="{LEFT}" y1="{BASE}" x2="{RIGHT}" y2="{BASE}" stroke="#999"/>',
        f'<line x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{BASE}" stroke="#999"/>',
        _text((LEFT + RIGHT) / 2, H - 6, x_label, 12, "middle"),
    ]
    steps = max(1, round((high - low) / 0.05))
    for k in range(steps + 1):
        v = low + (high - low) * k / steps
        y = BASE - (BASE - TOP) * k / steps
        out.append(_text(LEFT - 6, y + 4, f"{v * 100:.0f}%", 11, "end"))
        out.append(f'<line x1="{LEFT}" y1="{y:.1f}" x2="{RIGHT}" y2="{y:.1f}" stroke="#eee"/>')
    return out


def line_chart(
    series: dict[str, list[tuple[float, float]]],
    x_ticks: list[tuple[float, str]],
    x_label: str,
    flat: dict[str, float] | None = None,
) -> str:
    """Lines over an x axis given by position 0..1 per point (the caller spaces them);
    `flat`: reference levels drawn dashed across the chart."""
    flat = flat or {}
    values = [v for pts in series.values() for _, v in pts] + list(flat.values())
    low, high = _y_range(values)
    out = _axes(low, high, x_label)

    def xy(x: float, v: float) -> tuple[float, float]:
        return LEFT + (RIGHT - LEFT) * x, BASE - (BASE - TOP) * (v - low) / (high - low)

    for x, label in x_ticks:
        px, _ = xy(x, low)
        out.append(_text(px, BASE + 15, label, 11, "middle"))
    legend_y = BASE - 10 - 14 * len(series)  # bottom left: the curves fall to the right
    for name, level in flat.items():
        _, py = xy(0, level)
        color = STRATEGY_COLORS.get(name, "#555")
        out.append(
            f'<line x1="{LEFT}" y1="{py:.1f}" x2="{RIGHT}" y2="{py:.1f}" stroke="{color}" '
            f'stroke-dasharray="5,4"/>'
        )
        out.append(
            _text(RIGHT - 4, py - 4, f"{LABELS.get(name, name)} {level * 100:.1f}%", 11, "end")
        )
    for name, pts in series.items():
        color = STRATEGY_COLORS.get(name, "#333")
        path = " ".join(f"{a:.1f},{b:.1f}" for a, b in (xy(x, v) for x, v in pts))
        out.append(f'<polyline points="{path}" fill="none" stroke="{color}" stroke-width="2"/>')
        for x, v in pts:
            px, py = xy(x, v)
            out.append(f'<circle cx="{px:.1f}" cy="{py:.1f}" r="3" fill="{color}"/>')
        out.append(_text(LEFT + 8, legend_y + 12, LABELS.get(name, name), 12))
        legend_y += 14
    return _svg("".join(out), W, H)


def strategy_bars(goodput: dict[str, float]) -> str:
    names = ["gpufailover", "five_minute_service", "naive_restart", "no_failover"]
    low = min(0.5, math.floor(min(goodput[n] for n in names) * 10) / 10)
    out = _axes(low, 1.0, "")
    slot = (RIGHT - LEFT) / len(names)
    for i, name in enumerate(names):
        v = goodput[name]
        y = BASE - (BASE - TOP) * (v - low) / (1.0 - low)
        x = LEFT + i * slot + slot * 0.2
        out.append(
            f'<rect x="{x:.1f}" y="{y:.1f}" width="{slot * 0.6:.1f}" height="{BASE - y:.1f}" '
            f'fill="{STRATEGY_COLORS[name]}"/>'
        )
        out.append(_text(x + slot * 0.3, y - 4, f"{v * 100:.1f}%", 12, "middle"))
        for k, word in enumerate(SHORT[name]):
            out.append(_text(x + slot * 0.3, BASE + 14 + 12 * k, word, 11, "middle"))
    return _svg("".join(out), W, H)


def _latency_chart(d: dict[str, Any]) -> str:
    pts = d["latency_sensitivity"]
    n = len(pts) - 1
    ticks = [(k / n, _short(ms)) for k, (ms, _) in enumerate(pts)]
    series = {"gpufailover": [(k / n, v) for k, (_, v) in enumerate(pts)]}
    flat = {k: d["goodput"][k] for k in ("no_failover", "five_minute_service")}
    return line_chart(series, ticks, "decision latency (evenly spaced points)", flat)


def _false_chart(d: dict[str, Any]) -> str:
    pts = d["false_quarantine_sensitivity"]
    n = len(pts) - 1
    ticks = [(k / n, f"{rate * 100:g}%") for k, (rate, _, _, _) in enumerate(pts)]
    series = {"gpufailover": [(k / n, fleet) for k, (_, _, fleet, _) in enumerate(pts)]}
    flat = {"five_minute_service": d["goodput"]["five_minute_service"]}
    return line_chart(series, ticks, "extra false quarantines per non-hardware failure", flat)


def _short(ms: int) -> str:
    return f"{ms // 1000}s" if ms < 60_000 else f"{ms // 60_000}m"


def render(r: Report) -> str:
    d = r.data
    body = [
        "<h1>gpufailover: goodput at real failure rates</h1>",
        f"<pre>{escape(text(r))}</pre>",
        '<div class="grid"><div><h2>Effective training time</h2>',
        strategy_bars(d["goodput"]),
        "</div><div><h2>Sensitivity to decision latency</h2>",
        _latency_chart(d),
        "</div><div><h2>Sensitivity to false quarantines</h2>",
        _false_chart(d),
        "<p>Effective training time per GPU-hour paid for: the job's nodes plus the healthy "
        "nodes a false quarantine keeps out until they are back.</p></div></div>",
        "<p>Model, assumptions and the Llama 3 comparison: docs/demo.md, "
        "&ldquo;Goodput at real failure rates&rdquo;.</p>",
    ]
    return (
        '<!doctype html><html><head><meta charset="utf-8"><title>gpufailover goodput</title>'
        f"<style>{CSS}</style></head><body>{''.join(body)}</body></html>"
    )
