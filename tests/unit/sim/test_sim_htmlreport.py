"""The HTML report's charts as drawn (SVG markup, no browser): colours, time axis, broken strip."""

from __future__ import annotations

import itertools
import xml.etree.ElementTree as ET

import pytest
from report_input import demo_input

from producers.sim import htmlreport
from producers.sim.htmlreport import DECISION_COLORS, HOUR_MS, bars, fleet_chart, time_ticks
from schemas.decisions import Evidence
from streams.engine.decide import Termination, decide
from streams.policy import load_policy

SVG = "{http://www.w3.org/2000/svg}"


def svg_elements(svg: str, tag: str, cls: str) -> list[ET.Element]:
    root = ET.fromstring(svg)
    return [e for e in root.iter(f"{SVG}{tag}") if e.get("class") == cls]


def engine_outcomes() -> set[str]:
    """Every verdict/action decide() emits: each evidence class (or none) for a job with and
    without failover, spot or not, with retries left and spent."""
    policy = load_policy()
    outcomes = set()
    for cls, failover, kind, attempt in itertools.product(
        ("hardware", "software", "transient", None), (True, False), ("batch", "spot"), (0, 99)
    ):
        term = Termination("j", attempt, 1_000, ("n1",), None, failover, kind, None)
        evidence = [] if cls is None else [Evidence("n1", 0, "xid", 79, 900, cls)]
        d = decide(term, evidence, policy)
        outcomes.add(f"{d.verdict}/{d.action}")
    return outcomes


def test_every_decision_the_engine_emits_has_its_own_colour() -> None:
    outcomes = engine_outcomes()
    assert {"hardware/failover", "transient/give_up", "unknown/fail"} <= outcomes
    assert outcomes <= set(DECISION_COLORS)
    assert len(set(DECISION_COLORS.values())) == len(DECISION_COLORS)


def bar_fills(svg: str) -> dict[str, str]:
    return {e.get("data-series", ""): e.get("fill", "") for e in svg_elements(svg, "rect", "bar")}


def test_a_decision_series_keeps_its_colour_whatever_comes_before_it() -> None:
    alone = bar_fills(bars([("transient/give_up", 2.0)], fmt="n", colors=DECISION_COLORS))
    summary, _, _ = demo_input()
    items = [(k, float(n)) for k, n in summary["decisions"]["by_verdict_action"].items()]
    demo = bar_fills(bars(items, fmt="n", colors=DECISION_COLORS))
    assert alone["transient/give_up"] == demo["transient/give_up"]
    assert len(set(demo.values())) == len(demo) == 5  # the run's five series, five colours


def test_a_series_no_palette_names_is_still_drawn() -> None:
    fills = bar_fills(bars([("new/verdict", 1.0)], fmt="n", colors=DECISION_COLORS))
    assert fills == {"new/verdict": htmlreport.UNLISTED_COLOR}


@pytest.mark.parametrize(
    ("span_h", "labels"),
    [
        (4.0, ["0 h", "1 h", "2 h", "3 h", "4 h"]),
        (2.5, ["0 h", "0.5 h", "1 h", "1.5 h", "2 h", "2.5 h"]),  # a run stopped early
        (3.2, ["0 h", "1 h", "2 h", "3.2 h"]),  # 3 h is too close to the end to keep
        (0.25, ["0 min", "5 min", "10 min", "15 min"]),
        (30 * 24.0, ["0 d", "7 d", "14 d", "21 d", "30 d"]),
    ],
)
def test_time_ticks_run_from_the_start_to_the_end(span_h: float, labels: list[str]) -> None:
    ticks = time_ticks(round(span_h * HOUR_MS))
    assert [label for _, label in ticks] == labels
    assert ticks[0][0] == 0.0 and ticks[-1][0] == pytest.approx(1.0)


def test_fleet_axis_is_labelled_to_the_end_of_the_run_not_the_last_sample() -> None:
    _, timeline, start_ms = demo_input()
    assert timeline[-1][0] - start_ms < 4 * HOUR_MS  # the case the old chart cut at 3 h
    svg = fleet_chart(timeline, start_ms, 64, start_ms + 4 * HOUR_MS)
    ticks = svg_elements(svg, "text", "x-tick")
    assert [t.text for t in ticks] == ["0 h", "1 h", "2 h", "3 h", "4 h"]
    [plot] = svg_elements(svg, "rect", "plot-area")
    right_edge = float(plot.get("x", "")) + float(plot.get("width", ""))
    assert float(ticks[-1].get("x", "")) == pytest.approx(right_edge, abs=0.1)


def test_one_broken_node_in_a_big_fleet_fills_the_broken_strip() -> None:
    _, timeline, start_ms = demo_input()
    broken_at = [t for t, *_, broken in timeline if broken]
    assert len(broken_at) == 1  # the demo run had one sample with one broken node
    svg = fleet_chart(timeline, start_ms, 64, start_ms + 4 * HOUR_MS)
    [strip] = svg_elements(svg, "rect", "broken-strip")
    [mark] = svg_elements(svg, "rect", "broken-mark")
    assert float(mark.get("height", "")) == float(strip.get("height", ""))  # 1 of max 1
    assert float(mark.get("width", "")) >= 2.0
    legend = {e.get("data-series"): e for e in svg_elements(svg, "g", "legend-entry")}
    assert list(legend) == ["busy", "idle", "quarantined", "broken"]
    swatch = legend["broken"].find(f"{SVG}rect")
    assert swatch is not None and swatch.get("fill") == mark.get("fill")


def test_samples_outside_the_run_are_not_drawn() -> None:
    start = 1_000_000
    timeline = [(start + k * 600_000, 1, 0, 0, 0) for k in range(8)]
    timeline.append((start + 2 * HOUR_MS, 0, 0, 0, 1))  # a sample taken while draining
    svg = fleet_chart(timeline, start, 1, start + HOUR_MS + 600_000)
    assert svg_elements(svg, "rect", "broken-mark") == []
    assert [t.text for t in svg_elements(svg, "text", "x-tick")][-1] == "70 min"


def test_the_axis_spans_the_run_even_where_samples_stop_short() -> None:
    start = 1_000_000
    timeline = [(start + k * 600_000, 1, 0, 0, 0) for k in range(13)]  # 0 .. 2 h
    svg = fleet_chart(timeline, start, 1, start + 2 * HOUR_MS + HOUR_MS // 2)  # stopped at 2.5 h
    assert [t.text for t in svg_elements(svg, "text", "x-tick")] == [
        "0 h", "0.5 h", "1 h", "1.5 h", "2 h", "2.5 h"
    ]  # fmt: skip
    [plot] = svg_elements(svg, "rect", "plot-area")
    left, width = float(plot.get("x", "")), float(plot.get("width", ""))
    drawn = [
        float(point.split(",")[0])
        for polygon in ET.fromstring(svg).iter(f"{SVG}polygon")
        for point in polygon.get("points", "").split()
    ]
    assert max(drawn) == pytest.approx(left + width * 2 / 2.5, abs=0.1)  # data ends at 2 h
