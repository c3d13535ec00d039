"""The goodput run with the real engine in-process: ordering of the strategies, determinism,
the report and the command's flags."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import pytest

from gpufailover.cli import main
from producers.sim.goodput import HOUR_MS, LLAMA3_RATE, Params
from producers.sim.goodput_html import render
from producers.sim.goodput_report import build, text
from producers.sim.goodput_run import GoodputRun, RunConfig, drawn_incidents
from producers.sim.scenarios import BY_NAME
from streams.policy import load_policy

# A small job at 40x the real rate: ~80 interruptions in a few seconds of CPU.
CFG = RunConfig(
    nodes=64, spares=16, days=8, seed=7, rate_per_node_hour=40 * LLAMA3_RATE, repair_ms=6 * HOUR_MS
)


@pytest.fixture(scope="module")
def report_data() -> dict[str, object]:
    return build(CFG, load_policy()).data


def test_strategies_rank_as_expected_on_a_seeded_run(report_data: dict[str, object]) -> None:
    g = report_data["goodput"]
    assert isinstance(g, dict)
    assert report_data["interruptions"] >= 50  # type: ignore[operator]
    assert g["gpufailover"] > g["five_minute_service"] > g["naive_restart"]
    assert g["five_minute_service"] > g["no_failover"]
    assert 0 < g["no_failover"] < g["gpufailover"] < 1


def test_the_engine_decides_every_interruption_it_sees(report_data: dict[str, object]) -> None:
    live = report_data["live"]
    assert isinstance(live, dict)
    decided = sum(live["decisions"].values())
    assert decided >= report_data["hits"]["gpufailover"]  # type: ignore[index]
    assert live["undecided"] == 0 and live["quarantines"]["justified"] > 0
    assert live["engine_decision_s"]["max"] <= 121 + 5  # the grace, at the clock's step


def test_latency_and_false_quarantines_only_cost(report_data: dict[str, object]) -> None:
    lat = [v for _, v in report_data["latency_sensitivity"]]  # type: ignore[attr-defined]
    assert lat[0] > lat[-1]
    fq = [fleet for _, _, fleet, _ in report_data["false_quarantine_sensitivity"]]  # type: ignore[attr-defined]
    assert fq == sorted(fq, reverse=True) and fq[0] > fq[-1]


def test_the_same_seed_gives_the_same_run_and_another_seed_does_not() -> None:
    cfg = replace(CFG, days=2)
    a = GoodputRun(cfg, load_policy()).run()
    b = GoodputRun(cfg, load_policy()).run()
    c = GoodputRun(replace(cfg, seed=8), load_policy()).run()
    assert a.stops == b.stops and a.decisions == b.decisions and a.interruptions
    assert a.interruptions != c.interruptions


def test_report_text_and_html_show_the_four_strategies() -> None:
    cfg = replace(CFG, days=1, params=Params(max_failovers=5))
    r = build(cfg, load_policy())
    out = text(r)
    for label in ("gpufailover", "decide within 5 min", "naive restart", "no failover"):
        assert re.search(rf"{label}.*\d+\.\d%", out), label
    html = render(r)
    assert html.count("<svg") == 3 and "Sensitivity to decision latency" in html


def test_command_writes_the_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    page = tmp_path / "goodput.html"
    argv = ["goodput", "--nodes", "32", "--days", "1", "--html", str(page)]
    assert main(argv) == 0
    captured = capsys.readouterr()
    assert "effective training time" in captured.out
    assert "day 0/1" not in captured.err and "done in" in captured.err
    assert page.read_text(encoding="utf-8").startswith("<!doctype html>")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--nodes", "0"], "--nodes: '0': must be at least 1"),
        (["--days", "soon"], "--days: 'soon' is not a number"),
        (["--checkpoint-min", "0"], "--checkpoint-min: '0': must be at least 0.1"),
        (["--false-evidence", "2"], "--false-evidence: '2': a probability, at most 1"),
        (["--max-failovers", "-1"], "--max-failovers: '-1': must be at least 0"),
    ],
)
def test_bad_flags_exit_2_with_one_clear_line(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["goodput", *argv])
    assert exc.value.code == 2
    assert message in capsys.readouterr().err


def test_bad_env_value_names_the_variable(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("GPUFAILOVER_GOODPUT_SPARES", "many")
    with pytest.raises(SystemExit) as exc:
        main(["goodput"])
    assert exc.value.code == 2
    assert "GPUFAILOVER_GOODPUT_SPARES" in capsys.readouterr().err


def test_consequences_of_the_engine_s_decisions_are_not_shown_to_the_baselines() -> None:
    # Every software failure carries an unrelated hardware XID: the engine fails the job
    # over and the bug comes back; the baselines see only the drawn interruptions.
    cfg = replace(CFG, days=4, false_evidence=1.0)
    run = GoodputRun(cfg, load_policy()).run()
    assert run.secondary["bug_recurs"] > 0 and run.quarantines["false"] > 0
    drawn = [d for _, d in drawn_incidents(cfg) if BY_NAME[d.scenario].target == "job"]
    assert len(run.interruptions) == len(drawn)
    assert [i.true_class for i in run.interruptions] == [
        BY_NAME[d.scenario].true_class for d in drawn
    ]


def test_a_bad_policy_file_exits_2_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "policy.json"
    bad.write_text("{not json", encoding="utf-8")
    assert main(["goodput", "--days", "1", "--policy", str(bad)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("gpufailover goodput: bad policy:")
