"""The Kubernetes stage of the requeue service (`--scheduler kubernetes`): the scheduler stage
(`stage.py`) over `KubernetesScheduler`, metrics `gpufailover_requeue_kubernetes_*`."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from consumers.requeue.stage import StageMetrics


def kubernetes_stage_metrics(registry: CollectorRegistry | None = None) -> StageMetrics:
    return StageMetrics.create("kubernetes", registry)
