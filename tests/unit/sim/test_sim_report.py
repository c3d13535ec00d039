"""The report: text and self-contained HTML from a broker-free run, and its pass/fail checks."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from sim_oracle import run_offline

from producers.sim import htmlreport, report
from producers.sim.config import HOUR_MS, SimConfig
from producers.sim.results import summarize
from producers.sim.runner import RunState, sample


@pytest.fixture(scope="module")
def summary() -> dict[str, Any]:
    engine, ett, _ = run_offline(SimConfig(nodes=16, seed=2, horizon_ms=3 * HOUR_MS))
    s = summarize(engine, ett, Counter({"hang": 1}))
    s["run"] = {"seed": 2, "time_scale": 120.0, "sim_hours": 3.0, "wall_s": 90.0, "drain_s": 0.5,
                "prefix": "demo-2-x.", "stopped": None, "finished": "now"}  # fmt: skip
    return s


def test_text_report_has_every_section_and_passes(summary: dict[str, Any]) -> None:
    text = report.render(summary)
    sections = ["incidents", "decisions", "accuracy", "quarantines", "decision latency"]
    sections += ["effective training time", "no failover", "naive restart", "alerts     hang 1"]
    for part in sections:
        assert part in text, part
    assert text.count("[PASS]") == 4 and "[FAIL]" not in text


def test_checks_fail_on_what_the_issue_forbids(summary: dict[str, Any]) -> None:
    bad = {**summary, "quarantines": {**summary["quarantines"], "false": 1}}
    bad["decisions"] = {**summary["decisions"], "missing": [3]}
    failed = [text for text, ok in report.checks(bad) if not ok]
    assert failed == [
        "every job failure got exactly one decision",
        "no healthy node quarantined (outside known false-evidence cases)",
    ]


def test_stopped_run_says_so(summary: dict[str, Any]) -> None:
    s = {**summary, "run": {**summary["run"], "stopped": "SIGINT"}}
    assert report.render(s).startswith("gpufailover demo report (partial: the run was stopped")


def test_html_is_self_contained_with_charts(summary: dict[str, Any]) -> None:
    engine, _, _ = run_offline(SimConfig(nodes=16, seed=2, horizon_ms=3 * HOUR_MS))
    state = RunState(engine, 120.0)
    sample(state)  # after the run: outside the chart's time axis, like a drain's samples
    start = engine.start_ms
    timeline = [(start + k * HOUR_MS, 12, 3, 1, 0) for k in range(3)] + state.timeline
    page = htmlreport.render(summary, timeline, start)
    assert page.startswith("<!doctype html>") and page.count("<svg") == 4
    assert "<script" not in page and "src=" not in page and "href=" not in page
    assert "PASS: effective training time above both baselines" in page


@pytest.mark.parametrize(("n", "text"), [(0, "0 cases"), (1, "1 case"), (2, "2 cases")])
def test_counts_agree_with_their_noun(n: int, text: str) -> None:
    assert report.plural(n, "case") == text


def test_report_says_one_follow_up_and_one_false_evidence_case(summary: dict[str, Any]) -> None:
    s = {**summary, "incidents": {**summary["incidents"], "secondary": 1}}
    case = {"incident": 7, "scenario": "app_xid", "expected": "x", "visible": "y", "got": "y"}
    s["accuracy"] = {**summary["accuracy"], "false_evidence_cases": [case]}
    text = report.render(s)
    assert "(1 follow-up of earlier outcomes)" in text
    assert "1 known false-evidence case graded apart" in text
    ett = summary["effective_training_time"]
    assert f"replays the trace's {report.plural(ett['hits'], 'injected job failure')}" in text
