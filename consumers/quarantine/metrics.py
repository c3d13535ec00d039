"""Quarantine service metrics, `gpufailover_quarantine_*`, on an injected registry.

Labels are bounded (reasons, modes, causes, actions, logical topics): never nodes or jobs.
"""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge

from consumers.runtime.metrics import LoopMetrics

_P = "gpufailover_quarantine"


@dataclass(frozen=True)
class QuarantineMetrics:
    loop: LoopMetrics
    quarantines: Counter  # labels: reason, mode (applied|dry_run)
    releases: Counter
    refused: Counter
    duplicates: Counter  # labels: source (request|decision)
    stale: Counter  # labels: source (request|decision)
    breaker_trips: Counter  # labels: cause
    breaker_resets: Counter
    breaker_tripped: Gauge
    nodes_quarantined: Gauge
    window_nodes: Gauge
    fleet_nodes: Gauge
    actuator_calls: Counter  # labels: action
    actuator_errors: Counter  # labels: action
    actuations_owed: Gauge
    lemons: Counter
    lemon_nodes: Gauge
    validation_steps: Counter  # labels: source (operator|repair|result), outcome (lifecycle.py)

    @staticmethod
    def create(registry: CollectorRegistry | None = None) -> QuarantineMetrics:
        r = CollectorRegistry() if registry is None else registry
        return QuarantineMetrics(
            loop=LoopMetrics.create(r, "quarantine"),
            quarantines=Counter(
                f"{_P}_quarantines_total", "Nodes quarantined", ["reason", "mode"], registry=r
            ),
            releases=Counter(f"{_P}_releases_total", "Node releases actuated", registry=r),
            refused=Counter(
                f"{_P}_refused_total", "Quarantines refused by the tripped breaker", registry=r
            ),
            duplicates=Counter(
                f"{_P}_duplicates_total",
                "Requests and decisions for nodes already quarantined, or decisions already seen",
                ["source"],
                registry=r,
            ),
            stale=Counter(
                f"{_P}_stale_total",
                "Requests and decisions not newer than the node's latest release (not applied)",
                ["source"],
                registry=r,
            ),
            breaker_trips=Counter(
                f"{_P}_breaker_trips_total", "Breaker trips", ["cause"], registry=r
            ),
            breaker_resets=Counter(
                f"{_P}_breaker_resets_total", "Breaker resets by operator command", registry=r
            ),
            breaker_tripped=Gauge(
                f"{_P}_breaker_tripped", "1 while the breaker refuses quarantines", registry=r
            ),
            nodes_quarantined=Gauge(
                f"{_P}_nodes_quarantined", "Nodes currently quarantined", registry=r
            ),
            window_nodes=Gauge(
                f"{_P}_window_nodes", "Nodes quarantined within the breaker window", registry=r
            ),
            fleet_nodes=Gauge(f"{_P}_fleet_nodes", "Known fleet size", registry=r),
            actuator_calls=Counter(
                f"{_P}_actuator_calls_total", "Actuator calls", ["action"], registry=r
            ),
            actuator_errors=Counter(
                f"{_P}_actuator_errors_total", "Actuator calls that failed", ["action"], registry=r
            ),
            actuations_owed=Gauge(
                f"{_P}_actuations_owed",
                "Desired states on nodes.quarantine not actuated yet (failing ones included)",
                registry=r,
            ),
            lemons=Counter(
                f"{_P}_lemons_total",
                "Quarantines of nodes that the lemon rule marks lemon",
                registry=r,
            ),
            lemon_nodes=Gauge(
                f"{_P}_lemon_nodes", "Nodes out of service and marked lemon", registry=r
            ),
            validation_steps=Counter(
                f"{_P}_validation_steps_total",
                "Validation requests and results by source and outcome (failed: the node "
                "stays quarantined)",
                ["source", "outcome"],
                registry=r,
            ),
        )
