"""Effective training time: the segment accounting and the two baselines, by hand."""

from __future__ import annotations

import pytest

from producers.sim.effective import Costs, Ett, Hit, JobSpan, replay, replay_job, run_segment

MIN = 60_000
C = Costs(restart_ms=3 * MIN, checkpoint_ms=30 * MIN, mttr_ms=60 * MIN, naive_restart_ms=1 * MIN)
JOB = JobSpan("j", gpus=8, first_start_ms=0, work_ms=10_000 * MIN)  # never finishes here
H = 300 * MIN


def test_a_failure_keeps_only_what_was_checkpointed() -> None:
    # 3 min start-up, then 70 min of training: two checkpoints (60 min) survive.
    assert run_segment(0, 73 * MIN, 0, JOB.work_ms, C, failed=True).gain_ms == 60 * MIN
    # Without a failure (the end of the run) everything done so far counts.
    assert run_segment(0, 73 * MIN, 0, JOB.work_ms, C, failed=False).gain_ms == 70 * MIN
    # Shorter than the start-up: nothing.
    assert run_segment(0, 2 * MIN, 0, JOB.work_ms, C, failed=True).gain_ms == 0


def test_a_job_that_finishes_inside_the_segment() -> None:
    seg = run_segment(10 * MIN, 200 * MIN, 50 * MIN, 80 * MIN, C, failed=True)
    assert seg.gain_ms == 30 * MIN and seg.done_ms == 10 * MIN + 3 * MIN + 30 * MIN


def test_no_failures_is_the_same_in_both_baselines() -> None:
    for strategy in ("no_failover", "naive_restart"):
        e = replay_job(strategy, JOB, [], H, C)
        assert e == Ett(8 * (H - 3 * MIN), 8 * H)


def test_hardware_failure_waits_for_a_person_in_both_baselines() -> None:
    hit = Hit("j", onset_ms=100 * MIN, term_ms=101 * MIN, true_class="hardware")
    for strategy in ("no_failover", "naive_restart"):
        e = replay_job(strategy, JOB, [hit], H, C)
        # 90 min kept of the first attempt; restart at 101 + 60 = 161, 3 min start-up, to 300.
        assert e.useful_gpu_ms == 8 * (90 * MIN + (300 - 161 - 3) * MIN), strategy
        assert e.held_gpu_ms == 8 * H


def test_transient_failure_restarts_at_once_in_place_and_after_a_person_without_failover() -> None:
    hit = Hit("j", onset_ms=100 * MIN, term_ms=105 * MIN, true_class="transient")
    naive = replay_job("naive_restart", JOB, [hit], H, C)
    nofo = replay_job("no_failover", JOB, [hit], H, C)
    assert naive.useful_gpu_ms == 8 * (90 * MIN + (300 - 106 - 3) * MIN)
    assert nofo.useful_gpu_ms == 8 * (90 * MIN + (300 - 165 - 3) * MIN)


def test_software_failure_ends_the_job_and_crash_loops_in_place() -> None:
    hit = Hit("j", onset_ms=100 * MIN, term_ms=101 * MIN, true_class="software")
    nofo = replay_job("no_failover", JOB, [hit], H, C)
    naive = replay_job("naive_restart", JOB, [hit], H, C)
    assert nofo == Ett(8 * 90 * MIN, 8 * 101 * MIN)
    assert naive == Ett(8 * 90 * MIN, 8 * 161 * MIN)  # held for nothing until a person stops it


def test_a_fault_that_finds_the_job_down_does_not_hit_it() -> None:
    first = Hit("j", onset_ms=100 * MIN, term_ms=101 * MIN, true_class="hardware")
    while_down = Hit("j", onset_ms=130 * MIN, term_ms=131 * MIN, true_class="hardware")
    assert replay_job("no_failover", JOB, [first, while_down], H, C) == replay_job(
        "no_failover", JOB, [first], H, C
    )


def test_replay_sums_jobs_and_ignores_other_jobs_hits() -> None:
    other = JobSpan("k", gpus=16, first_start_ms=50 * MIN, work_ms=10_000 * MIN)
    hit = Hit("j", onset_ms=100 * MIN, term_ms=101 * MIN, true_class="hardware")
    total = replay("no_failover", [JOB, other], [hit], H, C)
    assert total == replay_job("no_failover", JOB, [hit], H, C) + replay_job(
        "no_failover", other, [], H, C
    )
    assert 0 < total.ratio < 1


def test_unknown_strategy_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown strategy"):
        replay_job("pray", JOB, [], H, C)
