"""The goodput arithmetic on cases small enough to check by hand."""

from __future__ import annotations

import pytest

from producers.sim.goodput import (
    MINUTE_MS,
    Interruption,
    LiveStop,
    Params,
    Stop,
    baseline_stops,
    goodput,
    kept,
    retimed,
    with_false_quarantines,
)

M = MINUTE_MS
P = Params(checkpoint_ms=30 * M, restart_ms=10 * M, person_ms=60 * M, naive_restart_ms=M,
           service_latency_ms=5 * M, max_failovers=3)  # fmt: skip


def test_no_failure_counts_everything_after_the_first_start_up() -> None:
    g = goodput(0, 200 * M, [], P)
    assert (g.useful_ms, g.wall_ms, g.stops) == (190 * M, 200 * M, 0)


def test_one_failure_loses_the_work_since_the_last_checkpoint_and_the_downtime() -> None:
    # Start-up 0-10, trains 10-110 (checkpoints at 40, 70, 100), fails at 110: keeps 90 min.
    # Resumes at 130: start-up to 140, trains 140-200: 60 min. Total 150 of 200.
    g = goodput(0, 200 * M, [Stop(110 * M, 130 * M)], P)
    assert (g.useful_ms, g.stops) == (150 * M, 1)
    assert g.ratio == pytest.approx(0.75)


def test_a_failure_just_before_the_first_checkpoint_keeps_nothing() -> None:
    assert kept(0, 39 * M, P, failed=True) == 0
    assert kept(0, 40 * M, P, failed=True) == 30 * M
    assert kept(0, 39 * M, P, failed=False) == 29 * M


def test_a_failure_while_the_job_is_down_does_not_hit_it() -> None:
    stops = [Stop(110 * M, 130 * M), Stop(120 * M, 125 * M)]
    assert goodput(0, 200 * M, stops, P) == goodput(0, 200 * M, stops[:1], P)


def test_baselines_resume_as_each_strategy_says() -> None:
    hw = Interruption(100 * M, 101 * M, "hardware")
    tr = Interruption(300 * M, 305 * M, "transient")
    sw = Interruption(500 * M, 501 * M, "software")
    trace = [hw, tr, sw]
    assert baseline_stops("no_failover", trace, P, 0) == [
        Stop(100 * M, 161 * M), Stop(300 * M, 365 * M), Stop(500 * M, 561 * M)
    ]  # fmt: skip
    assert baseline_stops("naive_restart", trace, P, 0) == [
        Stop(100 * M, 161 * M), Stop(300 * M, 306 * M), Stop(500 * M, 561 * M)
    ]  # fmt: skip
    assert baseline_stops("five_minute_service", trace, P, 0) == [
        Stop(100 * M, 106 * M), Stop(300 * M, 310 * M), Stop(500 * M, 561 * M)
    ]  # fmt: skip


def test_the_five_minute_service_stops_for_a_person_past_the_retry_cap() -> None:
    trace = [Interruption(k * 100 * M, k * 100 * M + M, "hardware") for k in range(1, 6)]
    resumes = [s.resume_ms - s.onset_ms for s in baseline_stops("five_minute_service", trace, P, 0)]
    # three failovers, then a person; the person's restart is a new job: failovers again
    assert resumes == [6 * M, 6 * M, 6 * M, 61 * M, 6 * M]


def test_unknown_strategy_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown strategy"):
        baseline_stops("pray", [], P, 0)


def test_bad_parameters_are_refused() -> None:
    with pytest.raises(ValueError, match="checkpoint"):
        Params(checkpoint_ms=0)
    with pytest.raises(ValueError, match="restart_ms"):
        Params(restart_ms=-1)


def test_retiming_moves_only_automatic_resumes() -> None:
    stops = [LiveStop(100 * M, 101 * M, "hardware", automatic=True),
             LiveStop(300 * M, 361 * M, "software", automatic=False)]  # fmt: skip
    assert retimed(stops, 5 * M) == [Stop(100 * M, 106 * M), Stop(300 * M, 361 * M)]


def test_false_quarantines_delay_software_failures_and_are_counted() -> None:
    stops = [LiveStop(k * 100 * M, k * 100 * M + 61 * M, "software", automatic=False)
             for k in range(1, 5)]  # fmt: skip
    same, n0 = with_false_quarantines(stops, 0.0, P)
    assert n0 == 0 and same == [Stop(s.onset_ms, s.resume_ms) for s in stops]
    half, n = with_false_quarantines(stops, 0.5, P)
    assert n == 2
    delays = [h.resume_ms - s.resume_ms for h, s in zip(half, stops, strict=True)]
    assert delays == [0, 22 * M + 30_000, 0, 22 * M + 30_000]  # restart 10 + bug back 12.5
    with pytest.raises(ValueError, match="fraction"):
        with_false_quarantines(stops, 1.5, P)
