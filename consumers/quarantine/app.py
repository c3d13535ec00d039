"""The quarantine service on Kafka: `run_quarantine(settings, stop)`.

Startup: rebuild the quarantine set by reading `nodes.quarantine` to its end, restore the
breaker from its latest state on `failover.alerts`, then run two stages side by side:
- decide: consume requests, decisions and reset commands in one consumer group, one
  transaction per batch, writing the desired state to `nodes.quarantine`;
- actuate: consume `nodes.quarantine` in the group `<group>-actuator` and carry each desired
  state out, committing only what was actuated (`actuation_loop.py`).
The tail keeps following `nodes.quarantine`, so operator releases reach the running service.
If either stage fails, the other is stopped and the service fails: no half-alive service.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from prometheus_client import CollectorRegistry

from consumers.quarantine import alerts
from consumers.quarantine.actuation_loop import ActuationLoop
from consumers.quarantine.actuator import Actuator, Reconciler, make_actuator
from consumers.quarantine.breaker import BreakerState
from consumers.quarantine.config import QuarantineSettings
from consumers.quarantine.logic import QuarantineProcessor
from consumers.quarantine.metrics import QuarantineMetrics
from consumers.quarantine.table import QuarantineTable
from consumers.runtime.loop import LoopConfig, TransactionalLoop
from consumers.runtime.oneshot import read_key
from consumers.runtime.records import InRecord
from consumers.runtime.supervise import run_together
from consumers.runtime.tail import TopicTail
from gpufailover.backoff import Backoff
from gpufailover.security import PLAINTEXT, KafkaSecurity
from schemas.codec import loads
from schemas.errors import SchemaError
from schemas.event_time import EventTimeBounds

log = logging.getLogger(__name__)

SYNC_TIMEOUT_S = 60.0


async def run_quarantine(
    settings: QuarantineSettings,
    stop: asyncio.Event,
    *,
    registry: CollectorRegistry | None = None,
    actuator: Actuator | None = None,
) -> None:
    """Run the quarantine service until `stop` is set (or the task is cancelled)."""
    common, names = settings.common, settings.common.names
    metrics = QuarantineMetrics.create(registry)
    table = QuarantineTable()
    act = actuator or make_actuator(
        settings.actuator,
        settings.scheduler,
        settings.actuator_log,
        kubernetes=settings.kubernetes,
    )

    def table_error(rec: InRecord, exc: Exception) -> None:
        metrics.loop.table_errors.labels(topic="nodes.quarantine").inc()

    tail = TopicTail(
        common.bootstrap,
        [names.nodes_quarantine],
        table.apply_record,
        name=f"{common.group_id}-table",
        on_error=table_error,
        security=common.security,
    )
    actuation = ActuationLoop(
        common.bootstrap,
        f"{common.group_id}-actuator",
        names.nodes_quarantine,
        act,
        metrics,
        backoff=settings.actuator_backoff,
        dry_run=settings.dry_run,
        security=common.security,
    )
    processor = QuarantineProcessor(
        names,
        settings.breaker,
        table,
        act,
        metrics,
        group=common.group_id,
        dry_run=settings.dry_run,
        sync=lambda: tail.sync(SYNC_TIMEOUT_S),
        bounds=EventTimeBounds.from_env(live=True),
        lifecycle_policy=settings.lifecycle,
    )
    async with tail:
        await tail.sync(SYNC_TIMEOUT_S)
        processor.breaker = await restore_breaker(
            common.bootstrap, names.failover_alerts, security=common.security
        )
        log.info(
            "quarantine service %s: %d nodes quarantined, breaker %s%s",
            common.group_id,
            len(table.quarantined()),
            "TRIPPED" if processor.breaker.tripped else "closed",
            " (dry run)" if settings.dry_run else "",
        )
        loop_cfg = LoopConfig(
            bootstrap=common.bootstrap,
            group_id=common.group_id,
            transactional_id=common.transactional_id,
            topics=(
                names.quarantine_requests,
                names.failover_decisions,
                names.operators_audit,
                names.validation_results,
            ),
            names=names,
            security=common.security,
        )

        async def actuate() -> None:
            if isinstance(act, Reconciler) and not settings.dry_run:
                await reconcile(act, table, metrics, settings.actuator_backoff, stop)
            await actuation.run(stop)

        await run_together(
            TransactionalLoop(loop_cfg, processor, metrics.loop).run(stop), actuate()
        )


async def reconcile(
    act: Reconciler,
    table: QuarantineTable,
    metrics: QuarantineMetrics,
    backoff: Backoff,
    stop: asyncio.Event,
) -> None:
    """Make the scheduler agree with `nodes.quarantine` before actuating anything new (the
    actuation stage only replays what it had not committed). Retried with back-off until it
    succeeds or the service stops; the decide stage runs meanwhile."""
    failures = 0
    while not stop.is_set():
        metrics.actuator_calls.labels(action="reconcile").inc()
        try:
            changed = await act.reconcile(table.get)
        except Exception:
            failures += 1
            metrics.actuator_errors.labels(action="reconcile").inc()
            delay = backoff.delay_ms(failures) / 1000
            log.exception("reconcile failed %d time(s); retrying in %.1f s", failures, delay)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), delay)
            continue
        log.info("reconciled the scheduler with nodes.quarantine: %d node(s) changed", changed)
        return


async def restore_breaker(
    bootstrap: str, alerts_topic: str, *, security: KafkaSecurity = PLAINTEXT
) -> BreakerState:
    """The latest breaker state on `failover.alerts`, or a closed breaker."""
    latest = await read_key(bootstrap, alerts_topic, alerts.BREAKER_KEY, security=security)
    for rec in reversed(latest):
        if rec.value is None:
            continue
        try:
            return alerts.breaker_state_from_alert(loads(rec.value))
        except SchemaError as exc:
            log.warning("breaker state at %s unreadable, looking further back: %s", rec.where, exc)
    return BreakerState()


def serve(settings: QuarantineSettings) -> int:
    """Run the service in this process until SIGINT/SIGTERM (the CLI's and `python -m`'s entry)."""
    from consumers.runtime.service import run_standalone

    async def main(stop: asyncio.Event, registry: CollectorRegistry) -> None:
        await run_quarantine(settings, stop, registry=registry)

    common = settings.common
    return run_standalone("quarantine", main, common.metrics_port, common.metrics_host)
