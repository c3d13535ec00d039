"""The HTML report as a browser draws it: headless Chromium renders a real run's report and a
probe script reads back the laid-out charts (sizes, computed colours and font sizes, where the
time-axis labels landed)."""

from __future__ import annotations

import html
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import orjson
import pytest
from report_input import demo_input

from producers.sim import htmlreport

CHROMIUM = shutil.which("chromium")
pytestmark = pytest.mark.skipif(
    CHROMIUM is None,
    reason="headless Chromium is not installed (Debian package `chromium`; .ci/run installs it)",
)

# Appended to a copy of the report (the report itself has no script): what the browser laid out.
PROBE = """<script>
const box = e => e.getBoundingClientRect();
const style = e => getComputedStyle(e);
const charts = [...document.querySelectorAll("svg")].map(svg => ({
  width: box(svg).width, height: box(svg).height,
  bars: [...svg.querySelectorAll("rect.bar")].map(
    b => ({series: b.dataset.series, fill: style(b).fill, height: box(b).height})),
  legend: [...svg.querySelectorAll(".legend-entry")].map(g => ({
    series: g.dataset.series, fill: style(g.querySelector("rect")).fill,
    font_px: parseFloat(style(g.querySelector("text")).fontSize)})),
  ticks: [...svg.querySelectorAll("text.x-tick")].map(
    t => ({text: t.textContent, center: box(t).left + box(t).width / 2})),
  plot: [...svg.querySelectorAll(".plot-area")].map(
    p => ({left: box(p).left, right: box(p).right})),
  broken: [...svg.querySelectorAll(".broken-mark")].map(m => ({width: box(m).width,
    height: box(m).height, fill: style(m).fill})),
}));
const out = document.createElement("pre");
out.id = "probe";
out.textContent = JSON.stringify(charts);
document.body.appendChild(out);
</script>"""


def rendered(page: str, tmp_path: Path) -> list[dict[str, Any]]:
    """Per chart, what Chromium laid out (the probe's JSON from the dumped DOM)."""
    path = tmp_path / "report.html"
    path.write_text(page.replace("</body>", PROBE + "</body>"), encoding="utf-8")
    assert CHROMIUM is not None
    argv = [CHROMIUM, "--headless", "--disable-gpu", "--no-sandbox", "--no-first-run"]
    argv += [f"--user-data-dir={tmp_path / 'profile'}", "--window-size=1000,1400"]
    done = subprocess.run(
        [*argv, "--dump-dom", path.as_uri()], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    found = re.search(r'<pre id="probe">(.*?)</pre>', done.stdout, re.S)
    assert found is not None, done.stdout[-2000:]
    charts: list[dict[str, Any]] = orjson.loads(html.unescape(found.group(1)))
    return charts


@pytest.fixture(scope="module")
def charts(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    summary, timeline, start_ms = demo_input()
    page = htmlreport.render(summary, timeline, start_ms)
    return rendered(page, tmp_path_factory.mktemp("report"))


def test_the_four_charts_are_drawn(charts: list[dict[str, Any]]) -> None:
    assert len(charts) == 4  # effective training time, decisions, fleet, latency
    for chart in charts:
        assert chart["width"] >= 300 and chart["height"] >= 100, chart


def test_each_decision_series_has_its_own_colour(charts: list[dict[str, Any]]) -> None:
    summary, _, _ = demo_input()
    [decisions] = [c for c in charts if any(b["series"] == "hardware/failover" for b in c["bars"])]
    shown = {b["series"]: b["fill"] for b in decisions["bars"]}
    assert set(shown) == set(summary["decisions"]["by_verdict_action"])
    assert len(set(shown.values())) == len(shown), shown  # hardware/failover vs transient/give_up
    assert all(b["height"] > 0 for b in decisions["bars"])


def test_fleet_legend_is_distinct_and_readable(charts: list[dict[str, Any]]) -> None:
    [fleet] = [c for c in charts if c["legend"]]
    legend = fleet["legend"]
    assert [e["series"] for e in legend] == ["busy", "idle", "quarantined", "broken"]
    assert len({e["fill"] for e in legend}) == len(legend), legend
    assert min(e["font_px"] for e in legend) >= 12


def test_fleet_time_axis_is_labelled_to_the_end_of_the_run(charts: list[dict[str, Any]]) -> None:
    [fleet] = [c for c in charts if c["ticks"]]
    [plot] = fleet["plot"]
    labels = [t["text"] for t in fleet["ticks"]]
    assert labels == ["0 h", "1 h", "2 h", "3 h", "4 h"]  # a 4-hour run
    assert fleet["ticks"][0]["center"] == pytest.approx(plot["left"], abs=1.0)
    assert fleet["ticks"][-1]["center"] == pytest.approx(plot["right"], abs=1.0)


def test_the_one_broken_node_is_visible(charts: list[dict[str, Any]]) -> None:
    [fleet] = [c for c in charts if c["legend"]]
    [mark] = fleet["broken"]  # the run's one sample with a broken, unquarantined node
    assert mark["width"] >= 2 and mark["height"] >= 20, mark
    broken = next(e for e in fleet["legend"] if e["series"] == "broken")
    assert mark["fill"] == broken["fill"]
