"""Requeue service metrics, `gpufailover_requeue_*`, on an injected registry (no job labels)."""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Histogram

from consumers.runtime.metrics import LoopMetrics

_P = "gpufailover_requeue"
EXCLUDE_BUCKETS = (0, 1, 2, 4, 8, 16, 32, 64, 128, 256)


@dataclass(frozen=True)
class RequeueMetrics:
    loop: LoopMetrics
    commands: Counter  # labels: reason (the decision's rule: a closed set)
    skipped: Counter  # labels: action
    duplicates: Counter
    spec_missing: Counter
    exclude_nodes: Histogram

    @staticmethod
    def create(registry: CollectorRegistry | None = None) -> RequeueMetrics:
        r = CollectorRegistry() if registry is None else registry
        return RequeueMetrics(
            loop=LoopMetrics.create(r, "requeue"),
            commands=Counter(
                f"{_P}_commands_total", "Requeue commands published", ["reason"], registry=r
            ),
            skipped=Counter(
                f"{_P}_skipped_total",
                "Decisions that need no requeue, by action",
                ["action"],
                registry=r,
            ),
            duplicates=Counter(
                f"{_P}_duplicates_total",
                "Decisions for a (job, attempt) already requeued: nothing published",
                registry=r,
            ),
            spec_missing=Counter(
                f"{_P}_spec_missing_total",
                "Commands published without a spec (no jobs.events record of the job)",
                registry=r,
            ),
            exclude_nodes=Histogram(
                f"{_P}_exclude_nodes",
                "Nodes excluded per requeue command",
                buckets=EXCLUDE_BUCKETS,
                registry=r,
            ),
        )
