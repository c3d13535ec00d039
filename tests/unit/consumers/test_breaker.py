"""The circuit breaker's arithmetic, on event time."""

from __future__ import annotations

import pytest

from consumers.quarantine import breaker as b
from consumers.quarantine.breaker import BreakerConfig, BreakerState

CFG = BreakerConfig(window_ms=600_000, max_share=0.2, max_nodes=50, min_nodes=2, fleet_size=0)


@pytest.mark.parametrize(
    ("would_be", "fleet", "cause"),
    [
        (1, 1, None),  # a tiny fleet never trips at or below min_nodes
        (2, 2, None),
        (3, 100, None),  # 3% of the fleet
        (20, 100, None),  # exactly 20%: not more than
        (21, 100, "share"),
        (3, 10, "share"),
        (50, 1000, None),
        (51, 1000, "max_nodes"),  # the count limit, whatever the fleet
        (51, 10, "max_nodes"),  # both: the count limit is reported
    ],
)
def test_trip_cause(would_be: int, fleet: int, cause: str | None) -> None:
    assert b.trip_cause(CFG, would_be, fleet) == cause


def test_known_fleet_is_the_larger_of_the_setting_and_the_nodes_seen() -> None:
    cfg = BreakerConfig(fleet_size=100)
    assert b.known_fleet(cfg, 7) == 100
    assert b.known_fleet(cfg, 140) == 140
    assert b.known_fleet(BreakerConfig(), 7) == 7


def test_window_counts_event_time_back_from_the_watermark() -> None:
    times = [0, 400_000, 1_000_000, 1_000_001, 1_599_999]
    state = BreakerState()
    # Window (1_000_000, 1_600_000]: ts 1_000_000 is just out.
    assert b.count_in_window(CFG, state, 1_600_000, times) == 2
    assert b.count_in_window(CFG, state, 1_000_001, times) == 2  # (400_001 .. 1_000_001]
    assert b.count_in_window(CFG, state, 10_000_000, times) == 0  # wall clock plays no part


def test_a_reset_restarts_the_count_from_its_watermark() -> None:
    state = b.reset(BreakerState(tripped=True, tripped_wall_ms=5), watermark_ms=1_000_000)
    assert not state.tripped and state.floor_ts_ms == 1_000_000
    assert b.count_in_window(CFG, state, 1_100_000, [999_000, 1_000_000, 1_050_000]) == 1
    # The floor stops mattering once the window has moved past it.
    assert b.window_start(CFG, state, 2_000_000) == 1_400_000


def test_trip_records_cause_counts_and_both_clocks() -> None:
    state = b.trip(BreakerState(), "share", 3, 10, watermark_ms=1_000, wall_ms=99)
    assert state == BreakerState(True, "share", 3, 10, 1_000, 99, None)


def test_reset_applies_only_to_a_tripped_breaker_and_after_the_trip() -> None:
    tripped = BreakerState(tripped=True, tripped_wall_ms=1_000)
    assert b.reset_applies(tripped, 1_000)
    assert b.reset_applies(tripped, 2_000)
    assert not b.reset_applies(tripped, 999)  # issued before this trip
    assert not b.reset_applies(BreakerState(), 2_000)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"window_ms": 0},
        {"max_share": 0.0},
        {"max_share": 1.5},
        {"max_nodes": 0},
        {"fleet_size": -1},
    ],
)
def test_config_rejects_nonsense(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError, match="breaker"):
        BreakerConfig(**kwargs)  # type: ignore[arg-type]
