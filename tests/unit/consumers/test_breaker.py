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


def test_the_fleet_is_the_setting_or_the_inventory_and_unknown_is_zero() -> None:
    assert b.known_fleet(BreakerConfig(fleet_size=100)) == 100
    inventory = frozenset({"a", "b", "c"})
    assert b.known_fleet(BreakerConfig(fleet_size=100, inventory=inventory)) == 3
    assert b.known_fleet(BreakerConfig()) == 0


def test_without_a_fleet_the_share_rule_is_off_and_the_count_limit_stays() -> None:
    assert b.trip_cause(CFG, 3, 0) is None  # the 3rd quarantine of an unknown fleet
    assert b.trip_cause(CFG, 50, 0) is None
    assert b.trip_cause(CFG, 51, 0) == "max_nodes"


def test_only_inventory_nodes_are_in_the_fleet_when_an_inventory_is_given() -> None:
    cfg = BreakerConfig(inventory=frozenset({"gpu-1"}))
    assert b.in_inventory(cfg, "gpu-1") and not b.in_inventory(cfg, "ghost-1")
    assert b.in_inventory(BreakerConfig(), "anything")


def test_window_counts_arrival_time_back_from_now() -> None:
    times = [0, 400_000, 1_000_000, 1_000_001, 1_599_999]
    state = BreakerState()
    # Window (1_000_000, 1_600_000]: ts 1_000_000 is just out.
    assert b.count_in_window(CFG, state, 1_600_000, times) == 2
    assert b.count_in_window(CFG, state, 1_000_001, times) == 2  # (400_001 .. 1_000_001]
    assert b.count_in_window(CFG, state, 10_000_000, times) == 0  # all arrived long ago


def test_a_reset_restarts_the_count_from_its_wall_clock() -> None:
    state = b.reset(BreakerState(tripped=True, tripped_wall_ms=5), now_ms=1_000_000)
    assert not state.tripped and state.floor_ts_ms == 1_000_000
    assert b.count_in_window(CFG, state, 1_100_000, [999_000, 1_000_000, 1_050_000]) == 1
    # The floor stops mattering once the window has moved past it.
    assert b.window_start(CFG, state, 2_000_000) == 1_400_000


def test_trip_records_cause_counts_and_the_wall_clock() -> None:
    state = b.trip(BreakerState(), "share", 3, 10, now_ms=99)
    assert state == BreakerState(True, "share", 3, 10, 99, 99, None)


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
