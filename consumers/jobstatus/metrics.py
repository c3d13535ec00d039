"""Job status service metrics, `gpufailover_jobstatus_*`, on an injected registry."""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge

from consumers.runtime.metrics import LoopMetrics

_P = "gpufailover_jobstatus"


@dataclass(frozen=True)
class JobStatusMetrics:
    loop: LoopMetrics
    updates: Counter  # labels: status (a closed set)
    unchanged: Counter  # labels: event
    jobs: Gauge
    overdue_total: Counter
    overdue: Gauge
    awaited: Gauge

    @staticmethod
    def create(registry: CollectorRegistry | None = None) -> JobStatusMetrics:
        r = CollectorRegistry() if registry is None else registry
        return JobStatusMetrics(
            loop=LoopMetrics.create(r, "jobstatus"),
            updates=Counter(
                f"{_P}_updates_total", "Status records published, by status", ["status"], registry=r
            ),
            unchanged=Counter(
                f"{_P}_unchanged_total",
                "Inputs that changed no status (stale, redelivered, or no status of their own)",
                ["event"],
                registry=r,
            ),
            jobs=Gauge(f"{_P}_jobs", "Jobs with a status", registry=r),
            overdue_total=Counter(
                f"{_P}_decisions_overdue_total",
                "Terminations with no decision within the decision deadline (alerts raised)",
                registry=r,
            ),
            overdue=Gauge(
                f"{_P}_overdue_decisions",
                "Terminations past the decision deadline and still without a decision",
                registry=r,
            ),
            awaited=Gauge(
                f"{_P}_awaited_decisions",
                "Terminations read and still waiting for their decision",
                registry=r,
            ),
        )
