"""The rebalance watchdog: how long a stuck condition has held, and the thread's switch."""

from __future__ import annotations

from streams.watchdog import StuckTimer, start


def test_a_condition_held_past_the_timeout_reports_how_long() -> None:
    t = StuckTimer(timeout_s=10)
    assert t.observe(True, 100.0) is None
    assert t.observe(True, 110.0) is None  # exactly the timeout: not yet
    assert t.observe(True, 110.5) == 10.5


def test_a_break_in_the_condition_restarts_the_count() -> None:
    t = StuckTimer(timeout_s=10)
    t.observe(True, 100.0)
    assert t.observe(False, 109.0) is None
    assert t.observe(True, 112.0) is None
    assert t.observe(True, 121.0) is None  # 9 s since the new start
    assert t.observe(True, 122.5) == 10.5


def test_a_zero_timeout_starts_no_watchdog() -> None:
    assert start(lambda: True, timeout_s=0) is None
