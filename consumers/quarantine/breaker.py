"""The quarantine circuit breaker: pure functions of event time.

A wave of quarantines is more likely a fleet-wide cause (a bad driver roll-out, a cooling or
power event, a bug in the classifier) than many broken GPUs at once; quarantining on would empty
the cluster. So: when the nodes quarantined within `window_ms` (event time: the requests'
`ts_ms`, counted back from the largest `ts_ms` seen) would exceed `max_nodes`, or exceed
`max_share` of the known fleet while above `min_nodes`, the breaker trips and refuses every new
quarantine until an operator resets it. A reset also restarts the count: quarantines at or before
the watermark of the reset no longer count.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace

CAUSE_MAX_NODES = "max_nodes"
CAUSE_SHARE = "share"


@dataclass(frozen=True)
class BreakerConfig:
    window_ms: int = 600_000
    max_share: float = 0.2
    max_nodes: int = 50
    min_nodes: int = 2  # the share rule never trips at or below this many nodes
    fleet_size: int = 0  # known fleet = max(fleet_size, distinct nodes seen)

    def __post_init__(self) -> None:
        if self.window_ms <= 0:
            raise ValueError(f"breaker window must be > 0 ms, got {self.window_ms}")
        if not 0.0 < self.max_share <= 1.0:
            raise ValueError(f"breaker max share must be in (0, 1], got {self.max_share}")
        if self.max_nodes < 1 or self.min_nodes < 0 or self.fleet_size < 0:
            raise ValueError("breaker max nodes must be >= 1, min nodes and fleet size >= 0")


@dataclass(frozen=True)
class BreakerState:
    tripped: bool = False
    cause: str | None = None
    in_window: int = 0  # quarantines in the window, the refused one included, at the trip
    fleet: int = 0  # known fleet at the trip
    tripped_ts_ms: int | None = None  # event time (watermark) of the trip
    tripped_wall_ms: int | None = None  # wall clock of the trip: older resets do not apply
    floor_ts_ms: int | None = None  # quarantines at or before this event time no longer count


def known_fleet(cfg: BreakerConfig, nodes_seen: int) -> int:
    return max(cfg.fleet_size, nodes_seen)


def trip_cause(cfg: BreakerConfig, would_be: int, fleet: int) -> str | None:
    """Why quarantining one more node (making `would_be` in the window) trips, or None."""
    if would_be > cfg.max_nodes:
        return CAUSE_MAX_NODES
    if would_be > cfg.min_nodes and would_be > cfg.max_share * fleet:
        return CAUSE_SHARE
    return None


def window_start(cfg: BreakerConfig, state: BreakerState, watermark_ms: int) -> int:
    """Quarantines with ts_ms strictly above this count toward the window."""
    start = watermark_ms - cfg.window_ms
    return start if state.floor_ts_ms is None else max(start, state.floor_ts_ms)


def count_in_window(
    cfg: BreakerConfig, state: BreakerState, watermark_ms: int, times: Iterable[int]
) -> int:
    """How many of the nodes' latest quarantine times fall in the window ending at the watermark."""
    start = window_start(cfg, state, watermark_ms)
    return sum(1 for ts in times if start < ts <= watermark_ms)


def trip(
    state: BreakerState, cause: str, in_window: int, fleet: int, watermark_ms: int, wall_ms: int
) -> BreakerState:
    return replace(
        state,
        tripped=True,
        cause=cause,
        in_window=in_window,
        fleet=fleet,
        tripped_ts_ms=watermark_ms,
        tripped_wall_ms=wall_ms,
    )


def reset_applies(state: BreakerState, command_ts_ms: int) -> bool:
    """A reset acts on a tripped breaker, and only if issued after the trip (wall clock)."""
    return state.tripped and command_ts_ms >= (state.tripped_wall_ms or 0)


def reset(state: BreakerState, watermark_ms: int) -> BreakerState:
    return BreakerState(floor_ts_ms=watermark_ms)
