"""The simulator's settings: one frozen object (the demo CLI fills it from its flags)."""

from __future__ import annotations

from dataclasses import dataclass, field

from producers.sim.effective import Costs
from producers.sim.faults import Timing
from producers.sim.scenarios import Modifiers

MINUTE_MS = 60_000
HOUR_MS = 60 * MINUTE_MS


@dataclass(frozen=True)
class SimConfig:
    nodes: int = 64
    seed: int = 1
    horizon_ms: int = 4 * HOUR_MS  # simulated time of the run
    # Incidents per simulated hour per node. A real fleet sees ~1e-4 (failure-data.md: one
    # interruption per 3.1 h on 2,048 nodes); the demo compresses weeks into minutes.
    rate_per_node_hour: float = 0.16
    target_utilization: float = 0.8  # nodes the workload asks for / usable nodes
    health_interval_ms: int = 30_000  # each node agent's periodic `ok` sample
    heartbeat_ms: int = MINUTE_MS  # training telemetry heartbeat
    repair_ms: int = HOUR_MS  # a quarantined node is repaired and released after this
    epilog_ms: int = MINUTE_MS  # a finished or failed job's nodes are busy this long after
    lemons: int | None = None  # lemon nodes (None: 2% of the fleet, at least one)
    warmup_ms: int = 5 * MINUTE_MS  # no incident before this
    tail_ms: int = 15 * MINUTE_MS  # no incident after horizon - tail (all get decided)
    job_work_ms: tuple[int, int] = (2 * HOUR_MS, 10 * HOUR_MS)
    job_nodes: tuple[tuple[int, float], ...] = ((1, 0.35), (2, 0.3), (4, 0.2), (8, 0.15))
    lookback_ms: int = 600_000  # the policy's window, for grading (shipped policy: 600 s)
    grace_ms: int = 120_000  # (shipped policy: 120 s)
    timing: Timing = field(default_factory=Timing)
    mods: Modifiers = field(default_factory=Modifiers)
    costs: Costs = field(default_factory=Costs)

    def __post_init__(self) -> None:
        if self.nodes < 2:
            raise ValueError(f"nodes={self.nodes}: the fleet needs at least 2 nodes")
        if self.horizon_ms <= self.warmup_ms + self.tail_ms:
            raise ValueError("the run is shorter than its warm-up and tail")

    @property
    def lemon_count(self) -> int:
        return self.lemons if self.lemons is not None else max(1, round(self.nodes * 0.02))

    @property
    def node_names(self) -> tuple[str, ...]:
        return tuple(f"gpu-node-{i:03d}" for i in range(1, self.nodes + 1))
