"""The quarantine circuit breaker: pure functions of arrival (wall-clock) time.

A wave of quarantines is more likely a fleet-wide cause (a bad driver roll-out, a cooling or
power event, a bug in the classifier) than many broken GPUs at once; quarantining on would empty
the cluster. So: when the nodes quarantined within `window_ms` would exceed `max_nodes`, or
exceed `max_share` of the fleet while above `min_nodes`, the breaker trips and refuses every new
quarantine until an operator resets it. A reset also restarts the count: quarantines that
arrived at or before the reset no longer count.

Nothing a request says about itself steers it (issue 12):
- the window is on arrival time, the wall clock when the service applied each quarantine
  (after a restart: the Kafka timestamp of its `nodes.quarantine` record), not the requests'
  `ts_ms`: one request stamped in 2100 can no longer make every later one look old;
- the fleet is an inventory the operator gives (`fleet_size`, or the node names of
  `inventory`, whose size it then is), never the nodes named in requests or decisions: a
  forged decision naming 10,000 ghost nodes cannot dilute the share rule. Without one the
  share rule is off (only `max_nodes` applies): a fleet of 0 or "the nodes seen so far" made
  a small fleet trip on its 3rd real quarantine;
- with an inventory, a request for a node not in it is refused and never counted: forged
  requests for made-up nodes cannot trip the breaker and block real quarantines.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace

CAUSE_MAX_NODES = "max_nodes"
CAUSE_SHARE = "share"
CAUSE_UNKNOWN_NODE = "unknown_node"  # not a breaker trip: a request for a node not in the fleet


@dataclass(frozen=True)
class BreakerConfig:
    window_ms: int = 600_000
    max_share: float = 0.2
    max_nodes: int = 50
    min_nodes: int = 2  # the share rule never trips at or below this many nodes
    fleet_size: int = 0  # 0: unknown (the share rule is off) unless `inventory` is given
    inventory: frozenset[str] | None = None  # the fleet's node names; None: not known

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
    tripped_ts_ms: int | None = None  # wall clock of the trip (was: the event-time watermark)
    tripped_wall_ms: int | None = None  # wall clock of the trip: older resets do not apply
    floor_ts_ms: int | None = None  # quarantines arrived at or before this no longer count


def known_fleet(cfg: BreakerConfig) -> int:
    """The fleet size from the inventory; 0 when none was given (the share rule is off)."""
    return len(cfg.inventory) if cfg.inventory is not None else cfg.fleet_size


def in_inventory(cfg: BreakerConfig, node: str) -> bool:
    """Is `node` part of the fleet? Always, when no inventory of names was given."""
    return cfg.inventory is None or node in cfg.inventory


def trip_cause(cfg: BreakerConfig, would_be: int, fleet: int) -> str | None:
    """Why quarantining one more node (making `would_be` in the window) trips, or None.
    `fleet` 0 (unknown) leaves the share rule out."""
    if would_be > cfg.max_nodes:
        return CAUSE_MAX_NODES
    if fleet > 0 and would_be > cfg.min_nodes and would_be > cfg.max_share * fleet:
        return CAUSE_SHARE
    return None


def window_start(cfg: BreakerConfig, state: BreakerState, now_ms: int) -> int:
    """Quarantines that arrived strictly after this (wall clock) count toward the window."""
    start = now_ms - cfg.window_ms
    return start if state.floor_ts_ms is None else max(start, state.floor_ts_ms)


def count_in_window(
    cfg: BreakerConfig, state: BreakerState, now_ms: int, arrivals: Iterable[int]
) -> int:
    """How many of the nodes' latest quarantine arrivals fall in the window ending now."""
    start = window_start(cfg, state, now_ms)
    return sum(1 for ts in arrivals if start < ts <= now_ms)


def trip(state: BreakerState, cause: str, in_window: int, fleet: int, now_ms: int) -> BreakerState:
    return replace(
        state,
        tripped=True,
        cause=cause,
        in_window=in_window,
        fleet=fleet,
        tripped_ts_ms=now_ms,
        tripped_wall_ms=now_ms,
    )


def reset_applies(state: BreakerState, command_ts_ms: int) -> bool:
    """A reset acts on a tripped breaker, and only if issued after the trip (wall clock)."""
    return state.tripped and command_ts_ms >= (state.tripped_wall_ms or 0)


def reset(state: BreakerState, now_ms: int) -> BreakerState:
    """Closed again; quarantines that arrived up to `now_ms` (wall clock) no longer count."""
    return BreakerState(floor_ts_ms=now_ms)
