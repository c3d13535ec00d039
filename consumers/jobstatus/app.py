"""The job status service on Kafka: `run_job_status(settings, stop)`.

Startup: rebuild every job's status by reading `jobs.status` (its own compacted output) to its
end, and keep following it (this restores the terminations awaiting a decision too); then
consume `jobs.events` and `failover.decisions` in one consumer group, one transaction per
batch, and raise `decision_overdue` alerts for terminations left without a decision.
"""

from __future__ import annotations

import asyncio
import logging

from prometheus_client import CollectorRegistry

from consumers.jobstatus.config import JobStatusSettings
from consumers.jobstatus.logic import JobStatusProcessor, StatusTable
from consumers.jobstatus.metrics import JobStatusMetrics
from consumers.runtime.loop import LoopConfig, TransactionalLoop
from consumers.runtime.records import InRecord
from consumers.runtime.tail import TopicTail
from schemas.event_time import EventTimeBounds

log = logging.getLogger(__name__)

SYNC_TIMEOUT_S = 60.0


async def run_job_status(
    settings: JobStatusSettings, stop: asyncio.Event, *, registry: CollectorRegistry | None = None
) -> None:
    """Run the job status service until `stop` is set (or the task is cancelled)."""
    common, names = settings.common, settings.common.names
    metrics = JobStatusMetrics.create(registry)
    table = StatusTable()

    def table_error(rec: InRecord, exc: Exception) -> None:
        metrics.loop.table_errors.labels(topic="jobs.status").inc()

    tail = TopicTail(
        common.bootstrap,
        [names.jobs_status],
        table.apply_record,
        name=f"{common.group_id}-table",
        on_error=table_error,
        security=common.security,
    )
    processor = JobStatusProcessor(
        names,
        table,
        metrics,
        history_max=settings.history_max,
        deadline_ms=int(settings.decision_deadline_s * 1000),
        sync=lambda: tail.sync(SYNC_TIMEOUT_S),
        bounds=EventTimeBounds.from_env(live=True),
    )
    async with tail:
        await tail.sync(SYNC_TIMEOUT_S)
        log.info(
            "job status service %s: %d jobs known, %d terminations awaiting a decision "
            "(deadline %.0f s)",
            common.group_id,
            len(table),
            sum(table.awaited.values()),
            settings.decision_deadline_s,
        )
        loop_cfg = LoopConfig(
            bootstrap=common.bootstrap,
            group_id=common.group_id,
            transactional_id=common.transactional_id,
            topics=(names.jobs_events, names.failover_decisions),
            names=names,
            security=common.security,
        )
        await TransactionalLoop(loop_cfg, processor, metrics.loop).run(stop)


def serve(settings: JobStatusSettings) -> int:
    """Run the service in this process until SIGINT/SIGTERM (the CLI's and `python -m`'s entry)."""
    from consumers.runtime.service import run_standalone

    async def main(stop: asyncio.Event, registry: CollectorRegistry) -> None:
        await run_job_status(settings, stop, registry=registry)

    common = settings.common
    return run_standalone("job-status", main, common.metrics_port, common.metrics_host)
