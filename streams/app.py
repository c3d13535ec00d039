"""The classifier worker: a signal filter, two faust agents, their tables, one ticker.

Faust wiring only. The logic lives in `streams.signal_filter`, `streams.glue` and
`streams.job_glue`; an agent's loop (outputs before state, dead letters) in
`streams.agent_driver`; the filter's task, the ticks and the rebalance hook in
`streams.worker_hooks`; offsets and lag in `gpufailover.offsets`.
- signal filter (plain aiokafka, `streams.signal_loop`, in a child process of its own:
  `streams.filter_process`): gpu.xid, gpu.health, failover.term-by-node in batches ->
  failover.node-signals (what can change node state, plus each partition's watermark). Keeps
  the high-volume inputs off faust's per-record path and off its core.
- node agent (node-keyed, co-partitioned): failover.node-signals, nodes.quarantine; tables
  `node-states` and `clocks`.
- job agent (job-keyed): jobs.events, training.telemetry, failover.node-evidence,
  failover.ticks; tables `job-states`, `job-progress` and `progress-clocks`.
Both run with concurrency=1 (faust can lose data above 1) and catch every per-record error into
a dead letter: an agent that died while the worker looks alive is the failure mode to avoid.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, TypeVar, cast

import faust
from faust.types import TP
from mode.supervisors import CrashingSupervisor

from gpufailover.offsets import AgentProgress
from gpufailover.settings import state_dir
from schemas.event_time import EventTimeBounds
from schemas.topics import TopicNames
from streams.agent_driver import AgentDriver, Outputs, TopicLabels
from streams.changelog import Changelog
from streams.config import ClassifierSettings
from streams.deferred import DRAIN_EVERY_S
from streams.engine.job_side import JobState
from streams.engine.node_side import NodeState, PartitionClock
from streams.engine.progress import Progress, ProgressClock
from streams.faust_patches import apply as apply_faust_patches
from streams.faust_patches import watch_of
from streams.fetch_wait import install as install_fetch_wait
from streams.filter_process import FilterProcess, signal_group
from streams.glue import NodeGlue
from streams.job_glue import JobGlue
from streams.metrics import ClassifierMetrics
from streams.policy import load_policy
from streams.signal_loop import SignalLoop
from streams.tables import CodecTable, WriteBack
from streams.worker_hooks import (
    CommitSoon,
    forget_revoked,
    metrics_response,
    run_signal_filter,
    send_ticks,
)

log = logging.getLogger("gpufailover.classifier")
T = TypeVar("T")
apply_faust_patches()  # faust 0.15.3 loses input records after table recovery: see the module
install_fetch_wait()  # faust 0.15.3 lets a fetch wait 1.5 s at the broker: see the module


def build_app(settings: ClassifierSettings, metrics: ClassifierMetrics | None = None) -> faust.App:
    names = TopicNames(settings.topic_prefix)
    metrics = ClassifierMetrics() if metrics is None else metrics
    policy = load_policy(settings.policy or None)
    app = _faust_app(settings)

    def topic(*real: str) -> Any:
        return app.topic(
            *real,
            key_type=bytes,
            value_type=bytes,
            key_serializer="raw",
            value_serializer="raw",
            partitions=settings.partitions,
        )

    changelog = Changelog(lambda: app.producer)

    def faust_table(name: str) -> Any:
        schema: Any = faust.Schema(key_type=str, key_serializer="json", value_serializer="json")
        return app.Table(name, default=None, schema=schema, partitions=settings.partitions)

    def table(name: str) -> WriteBack[dict[str, Any]]:
        # Outputs before state: a record's table changes are held until its outputs are
        # acknowledged (`streams.agent_driver`).
        stored = faust_table(name)
        return WriteBack(stored, write=changelog.writer(stored))

    def clock_table(name: str, decode: Callable[[Any], T], encode: Callable[[T], Any]) -> Any:
        """A partition clock's table, holding the clock itself until the batch's flush: it is
        written with every record that sends outputs, and encoding its wake-ups (one per
        pending termination and node) at each write cost ~10% of a drain's CPU."""
        stored = faust_table(name)
        write = changelog.writer(stored)
        return WriteBack(
            CodecTable(stored, decode, encode),
            write=lambda key, clock, record: write(
                key, None if clock is None else encode(clock), record
            ),
        )

    node_inputs = (names.node_signals, names.nodes_quarantine)
    job_inputs = (names.jobs_events, names.training_telemetry, names.node_evidence, names.ticks)
    label = TopicLabels(names)
    outputs = Outputs(
        topic,
        (
            names.term_by_node,
            names.node_evidence,
            names.quarantine_requests,
            names.failover_decisions,
            names.ticks,
        ),
        metrics,
        label,
    )
    progress = AgentProgress(lambda: app.consumer, node_inputs + job_inputs, TP)
    # Records stamped too far ahead of the wall clock or older than the retention horizon
    # are dead-lettered where they are read, before they can move a watermark.
    bounds = EventTimeBounds.from_env(live=True)
    # The signal filter runs in a child process (its own core) unless asked otherwise; the
    # faust side asks either the same: lag and whether it is draining (streams.filter_process).
    signal_filter_runner: SignalLoop | FilterProcess
    if settings.filter_in_worker:
        signal_filter_runner = SignalLoop(
            settings.bootstrap,
            signal_group(settings),
            names,
            policy,
            int(settings.idle_after_s * 1000),
            metrics,
            bounds,
            security=settings.security,
        )
    else:
        signal_filter_runner = FilterProcess(settings, metrics)
    filter_lag = signal_filter_runner.lag
    metrics.lag_from(lambda: [(label(t), p, n) for t, p, n in progress.lags()] + filter_lag())

    # The node and job agents run concurrently, each with its own tables.
    node_tables = [
        table("node-states"),
        clock_table("clocks", PartitionClock.from_dict, PartitionClock.to_dict),
    ]
    job_tables = [
        table("job-states"),
        table("job-progress"),
        clock_table("progress-clocks", ProgressClock.from_dict, ProgressClock.to_dict),
    ]
    node_glue = NodeGlue(
        policy,
        names,
        CodecTable(node_tables[0], NodeState.from_dict, NodeState.to_dict),
        node_tables[1],
        bounds,
        backlog=lambda partition: progress.backlog(names.node_signals, partition),
        busy=signal_filter_runner.draining,
        evidence_partitions=settings.partitions,
    )
    job_glue = JobGlue(
        policy,
        names,
        CodecTable(job_tables[0], JobState.from_dict, JobState.to_dict),
        CodecTable(job_tables[1], Progress.from_dict, Progress.to_dict),
        job_tables[2],
        idle_after_ms=int(settings.idle_after_s * 1000),
        lagging=progress.lagging,
        bounds=bounds,
    )
    shared = (outputs, progress, metrics, names, label)

    def hold(tp: Any, offset: int) -> None:
        watch_of(app.consumer).hold(tp, offset)

    early_commit = CommitSoon(lambda: app.consumer.commit())

    def cap(partition: int, offset: int | None) -> None:
        lifted = watch_of(app.consumer).cap(TP(names.node_signals, partition), offset)
        if offset is None and lifted is not None:
            early_commit.request()  # a flood's worth of records committed now, not in 2.8 s

    node_driver = AgentDriver(
        "node", node_glue, node_tables, node_inputs, *shared, hold, changelog.send, cap
    )
    job_driver = AgentDriver("job", job_glue, job_tables, job_inputs, *shared, hold, changelog.send)

    app.on_partitions_revoked.connect(cast(Any, forget_revoked(node_glue, job_glue)))

    @app.task  # type: ignore[untyped-decorator]
    async def signal_filter() -> None:  # started after table recovery
        await run_signal_filter(signal_filter_runner, app.crash)

    @app.page("/metrics")
    async def metrics_page(view: Any, request: Any) -> Any:
        return metrics_response(view, request, metrics.registry)

    # concurrency=1: faust can lose data above 1.
    @app.agent(topic(*node_inputs), name="node-evidence", concurrency=1)
    async def node_agent(stream: Any) -> None:
        await node_driver.run(stream)

    @app.agent(topic(*job_inputs), name="job-terminations", concurrency=1)
    async def job_agent(stream: Any) -> None:
        await job_driver.run(stream)

    @app.timer(DRAIN_EVERY_S, name="held-evidence")  # type: ignore[untyped-decorator]
    async def held_evidence() -> None:
        try:
            await node_driver.drain_held()
        except Exception as exc:
            log.exception("applying held evidence failed: stopping the worker")
            await app.crash(exc)

    @app.timer(settings.tick_interval_s, name="clock-ticks")  # type: ignore[untyped-decorator]
    async def ticker() -> None:
        await send_ticks(outputs[names.ticks], settings.partitions)

    return app


def _faust_app(settings: ClassifierSettings) -> faust.App:
    datadir = state_dir() / "faust" / f"{settings.topic_prefix}{settings.app_id}"
    datadir.parent.mkdir(parents=True, exist_ok=True)
    return faust.App(
        f"{settings.topic_prefix}{settings.app_id}",
        broker=f"kafka://{settings.bootstrap}",
        store="memory://",
        # faust writes a data folder per app; keep it out of the working directory.
        datadir=str(datadir),
        topic_partitions=settings.partitions,
        topic_replication_factor=1,
        topic_disable_leader=True,
        consumer_auto_offset_reset="earliest",
        processing_guarantee="at_least_once",
        web_port=settings.web_port,
        web_host=settings.metrics_host,
        web_bind=settings.metrics_host,
        # /metrics is ours; faust's views would serve table contents and routing to anyone.
        web_tables_enabled=False,
        web_router_enabled=False,
        web_stats_enabled=False,
        broker_credentials=settings.security.faust_credentials(),
        key_serializer="raw",
        value_serializer="raw",
        agent_supervisor=CrashingSupervisor,
        broker_commit_every=1000,
        # Measured by `gpufailover bench` (BENCHMARKS.md): batching sends and a shorter stream
        # buffer cut flood catch-up and hardware-decision p99 under load; 2 ms, not 5: see
        # PRODUCER_LINGER_MS in streams/signal_loop.py.
        producer_linger=0.002,
        stream_buffer_maxsize=256,
    )
