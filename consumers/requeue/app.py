"""The requeue service on Kafka: `run_requeue(settings, stop)`.

Startup: one tail reads `nodes.quarantine` (the quarantine set), `jobs.events` (specs and
priorities) and `jobs.requeue` (what was already requeued) to their ends and keeps following;
then decisions are consumed in one consumer group, one transaction per batch. With
`--scheduler slurm` or `kubernetes` a second stage carries the commands out on that scheduler
(`stage.py` over `slurm.py` or `kubernetes.py`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from prometheus_client import CollectorRegistry

from consumers.quarantine.table import QuarantineTable
from consumers.requeue.config import RequeueSettings
from consumers.requeue.logic import RequeueProcessor
from consumers.requeue.metrics import RequeueMetrics
from consumers.requeue.slurm import SlurmScheduler
from consumers.requeue.slurm_stage import SlurmStage, SlurmStageMetrics
from consumers.requeue.stage import SchedulerStage
from consumers.requeue.state import JobSpecs, Requeued
from consumers.runtime.loop import LoopConfig, TransactionalLoop
from consumers.runtime.records import InRecord
from consumers.runtime.supervise import run_together
from consumers.runtime.tail import TopicTail
from schemas.event_time import EventTimeBounds

log = logging.getLogger(__name__)

SYNC_TIMEOUT_S = 60.0


async def run_requeue(
    settings: RequeueSettings, stop: asyncio.Event, *, registry: CollectorRegistry | None = None
) -> None:
    """Run the requeue service until `stop` is set (or the task is cancelled)."""
    common, names = settings.common, settings.common.names
    metrics = RequeueMetrics.create(registry)
    quarantine, specs, requeued = QuarantineTable(), JobSpecs(), Requeued()
    appliers = {
        names.nodes_quarantine: quarantine.apply_record,
        names.jobs_events: specs.apply_record,
        names.jobs_requeue: requeued.apply_record,
    }

    def apply(rec: InRecord) -> None:
        appliers[rec.topic](rec)

    def table_error(rec: InRecord, exc: Exception) -> None:
        metrics.loop.table_errors.labels(topic=names.logical(rec.topic)).inc()

    tail = TopicTail(
        common.bootstrap,
        list(appliers),
        apply,
        name=f"{common.group_id}-state",
        on_error=table_error,
        security=common.security,
    )
    processor = RequeueProcessor(
        names,
        quarantine,
        specs,
        requeued,
        metrics,
        failover_boost=settings.priority_boost,
        retry_boost=settings.retry_priority_boost,
        sync=tail.sync,
        bounds=EventTimeBounds.from_env(live=True),
        spec_wait_s=settings.spec_wait_s,
    )
    async with tail:
        await tail.sync(SYNC_TIMEOUT_S)
        log.info(
            "requeue service %s: %d jobs known, %d quarantined nodes, %d jobs requeued before",
            common.group_id,
            len(specs.jobs),
            len(quarantine.quarantined()),
            len(requeued.attempts),
        )
        loop_cfg = LoopConfig(
            bootstrap=common.bootstrap,
            group_id=common.group_id,
            transactional_id=common.transactional_id,
            topics=(names.failover_decisions,),
            names=names,
            security=common.security,
        )
        async with contextlib.AsyncExitStack() as resources:
            stage: SchedulerStage | None = None
            if settings.scheduler == "slurm":
                stage = SlurmStage(
                    common.bootstrap,
                    f"{common.group_id}-slurm",
                    names,
                    SlurmScheduler(settings.priority_boost, settings.retry_priority_boost),
                    SlurmStageMetrics.create(registry),
                    settings.backoff,
                    security=common.security,
                )
            elif settings.scheduler == "kubernetes":
                stage = await _kubernetes_stage(settings, registry, resources)
            decide = TransactionalLoop(loop_cfg, processor, metrics.loop).run(stop)
            if stage is None:
                await decide
            else:
                await run_together(decide, stage.run(stop))


async def _kubernetes_stage(
    settings: RequeueSettings,
    registry: CollectorRegistry | None,
    resources: contextlib.AsyncExitStack,
) -> SchedulerStage:
    """The stage over the Kubernetes API; its client is closed with `resources`. Refuses to
    start (SystemExit) when the failover PriorityClass is missing."""
    from consumers.requeue.k8s_stage import kubernetes_stage_metrics
    from consumers.requeue.kubernetes import KubernetesScheduler
    from gpufailover.kubeclient import make_async_client

    common = settings.common
    client = make_async_client(settings.kubeconfig, "gpufailover-requeue")
    resources.push_async_callback(client.close)
    scheduler = KubernetesScheduler(
        client,
        namespace=settings.k8s_namespace,
        failover_priority_class=settings.k8s_failover_priority_class,
        retry_priority_class=settings.k8s_retry_priority_class,
    )
    await scheduler.check()
    return SchedulerStage(
        "kubernetes",
        common.bootstrap,
        f"{common.group_id}-kubernetes",
        common.names,
        scheduler,
        kubernetes_stage_metrics(registry),
        settings.backoff,
        security=common.security,
    )


def serve(settings: RequeueSettings) -> int:
    """Run the service in this process until SIGINT/SIGTERM (the CLI's and `python -m`'s entry)."""
    from consumers.runtime.service import run_standalone

    async def main(stop: asyncio.Event, registry: CollectorRegistry) -> None:
        await run_requeue(settings, stop, registry=registry)

    common = settings.common
    return run_standalone("requeue", main, common.metrics_port, common.metrics_host)
