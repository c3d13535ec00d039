"""The requeue service on Kafka: `run_requeue(settings, stop)`.

Startup: one tail reads `nodes.quarantine` (the quarantine set), `jobs.events` (specs and
priorities) and `jobs.requeue` (what was already requeued) to their ends and keeps following;
then decisions are consumed in one consumer group, one transaction per batch. With
`--scheduler slurm` a second stage carries the commands out on Slurm (`slurm_stage.py`).
"""

from __future__ import annotations

import asyncio
import logging

from prometheus_client import CollectorRegistry

from consumers.quarantine.table import QuarantineTable
from consumers.requeue.config import RequeueSettings
from consumers.requeue.logic import RequeueProcessor
from consumers.requeue.metrics import RequeueMetrics
from consumers.requeue.slurm import SlurmScheduler
from consumers.requeue.slurm_stage import SlurmStage, SlurmStageMetrics
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
        )
        decide = TransactionalLoop(loop_cfg, processor, metrics.loop).run(stop)
        if settings.scheduler != "slurm":
            await decide
            return
        stage = SlurmStage(
            common.bootstrap,
            f"{common.group_id}-slurm",
            names,
            SlurmScheduler(settings.priority_boost, settings.retry_priority_boost),
            SlurmStageMetrics.create(registry),
            settings.backoff,
        )
        await run_together(decide, stage.run(stop))
