"""`gpufailover k8s-events` metrics, `gpufailover_kubernetes_events_*`, on an injected registry (no
job or pod names as labels)."""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge

_P = "gpufailover_kubernetes_events"


@dataclass(frozen=True)
class K8sEventsMetrics:
    published: Counter  # labels: type
    already_published: Gauge
    bad_pods: Counter
    publish_errors: Counter
    watch_restarts: Counter  # labels: why (gone|error)
    attempts: Gauge

    @staticmethod
    def create(registry: CollectorRegistry | None = None) -> K8sEventsMetrics:
        r = CollectorRegistry() if registry is None else registry
        return K8sEventsMetrics(
            published=Counter(
                f"{_P}_published_total", "Job events published, by type", ["type"], registry=r
            ),
            already_published=Gauge(
                f"{_P}_seeded_events",
                "(job, attempt, type) already on jobs.events when the process started",
                registry=r,
            ),
            bad_pods=Counter(
                f"{_P}_bad_pods_total",
                "Pod states skipped because their gpufailover labels cannot be read",
                registry=r,
            ),
            publish_errors=Counter(
                f"{_P}_publish_errors_total",
                "Failed publishes (retried with back-off until acknowledged)",
                registry=r,
            ),
            watch_restarts=Counter(
                f"{_P}_watch_restarts_total",
                "Pod watches started over: gone (resourceVersion expired: full list) or error",
                ["why"],
                registry=r,
            ),
            attempts=Gauge(f"{_P}_attempts", "Job attempts with pods being followed", registry=r),
        )
