"""The classifier worker: a signal filter, two faust agents, their tables, one ticker.

All logic lives in `streams.signal_filter`, `streams.glue` and `streams.job_glue`.
- signal filter (plain aiokafka, `streams.signal_loop`): gpu.xid, gpu.health,
  failover.term-by-node in batches -> failover.node-signals (what can change node state, plus
  each partition's watermark). Keeps the high-volume inputs off faust's per-record path.
- node agent (node-keyed, co-partitioned): failover.node-signals, nodes.quarantine; tables
  `node-states` and `clocks`.
- job agent (job-keyed): jobs.events, training.telemetry, failover.node-evidence,
  failover.ticks; tables `job-states`, `job-progress` and `progress-clocks`.
Both run with concurrency=1 (faust can lose data above 1) and catch every per-record error into
a dead letter: an agent that died while the worker looks alive is the failure mode to avoid.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable
from typing import Any, cast

import faust
import faust.exceptions
import orjson
from aiokafka.errors import KafkaError
from faust.types import TP
from mode.supervisors import CrashingSupervisor
from prometheus_client.exposition import choose_encoder

from gpufailover.settings import state_dir
from schemas.engine import Tick
from schemas.event_time import EventTimeBounds
from schemas.topics import TopicNames
from streams.config import ClassifierSettings
from streams.engine.job_side import JobState
from streams.engine.node_side import NodeState, PartitionClock
from streams.engine.progress import Progress, ProgressClock
from streams.faust_patches import apply as apply_faust_patches
from streams.glue import NodeGlue, Out, dead_letter
from streams.job_glue import JobGlue
from streams.metrics import ClassifierMetrics
from streams.policy import load_policy
from streams.signal_loop import SignalLoop
from streams.tables import CodecTable, WriteBack

log = logging.getLogger("gpufailover.classifier")
TICK = orjson.dumps(Tick().to_dict())  # failover.ticks: the same empty record every time
apply_faust_patches()  # faust 0.15.3 loses input records after table recovery: see the module


def build_app(settings: ClassifierSettings, metrics: ClassifierMetrics | None = None) -> faust.App:
    names = TopicNames(settings.topic_prefix)
    metrics = ClassifierMetrics() if metrics is None else metrics
    policy = load_policy(settings.policy or None)
    datadir = state_dir() / "faust" / f"{settings.topic_prefix}{settings.app_id}"
    datadir.parent.mkdir(parents=True, exist_ok=True)
    app = faust.App(
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
        # buffer cut flood catch-up and hardware-decision p99 under load.
        producer_linger=0.005,
        stream_buffer_maxsize=256,
    )

    def topic(*real: str) -> Any:
        return app.topic(
            *real,
            key_type=bytes,
            value_type=bytes,
            key_serializer="raw",
            value_serializer="raw",
            partitions=settings.partitions,
        )

    outputs = {
        real: topic(real)
        for real in (
            names.term_by_node,
            names.node_evidence,
            names.quarantine_requests,
            names.failover_decisions,
            names.ticks,
        )
    }

    def table(name: str) -> Any:
        schema: Any = faust.Schema(key_type=str, key_serializer="json", value_serializer="json")
        return app.Table(name, default=None, schema=schema, partitions=settings.partitions)

    processed: dict[TP, int] = {}

    def lagging(topic: str, partition: int) -> bool:
        """Does this input partition hold records this worker has not processed yet?"""
        tp = TP(topic, partition)
        try:
            highwater = app.consumer.highwater(tp)
        except (KeyError, AssertionError, AttributeError):
            return False  # not assigned here
        if highwater is None:
            return True  # not fetched yet: it may hold older records
        last = processed.get(tp)
        if last is None:
            # Nothing processed in this process yet: compare with the committed position.
            # (faust 0.15.3 keeps it in `_committed_offset`; pinned exactly in pyproject.)
            committed = app.consumer._committed_offset.get(tp)  # type: ignore[attr-defined]
            return bool(highwater > (committed or 0))
        return bool(highwater > last + 1)

    logical_names: dict[str, str] = {}

    def logical(real: str) -> str:
        name = logical_names.get(real)
        if name is None:
            try:
                name = names.logical(real)
            except KeyError:
                name = real
            logical_names[real] = name
        return name

    def lag() -> list[tuple[str, int, int]]:
        """(logical topic, partition, high water - next offset) of each assigned input."""
        rows: list[tuple[str, int, int]] = []
        try:
            assigned = app.consumer.assignment()
        except (AttributeError, AssertionError):
            return rows  # consumer not started
        for tp in assigned:
            if tp.topic not in inputs:
                continue  # changelogs
            highwater = app.consumer.highwater(tp)
            if highwater is None:
                continue  # not fetched yet
            last = processed.get(tp)
            if last is None:
                committed = app.consumer._committed_offset.get(tp)  # type: ignore[attr-defined]
                position = committed or 0
            else:
                position = last + 1
            rows.append((logical(tp.topic), tp.partition, max(0, int(highwater) - position)))
        return rows

    # Records stamped too far ahead of the wall clock or older than the retention horizon
    # are dead-lettered where they are read, before they can move a watermark.
    bounds = EventTimeBounds.from_env(live=True)
    signal_loop = SignalLoop(
        settings.bootstrap,
        f"{settings.topic_prefix}{settings.app_id}-signals",
        names,
        policy,
        int(settings.idle_after_s * 1000),
        metrics,
        bounds,
        security=settings.security,
    )
    metrics.lag_from(lambda: lag() + signal_loop.lag())

    # Outputs before state: what a record changes in the tables is held until its outputs
    # are acknowledged by the broker, then written (`drive`). A worker killed in between
    # restarts from the old state and sends the same outputs again under the same keys
    # (applied once downstream); the other order could persist "decided" and lose the decision.
    # The node and job agents run concurrently, each with its own tables.
    staged: dict[str, WriteBack[dict[str, Any]]] = {
        name: WriteBack(table(name))
        for name in ("node-states", "clocks", "job-states", "job-progress", "progress-clocks")
    }
    node_tables = [staged["node-states"], staged["clocks"]]
    job_tables = [staged["job-states"], staged["job-progress"], staged["progress-clocks"]]
    node_glue = NodeGlue(
        policy,
        names,
        CodecTable(staged["node-states"], NodeState.from_dict, NodeState.to_dict),
        CodecTable(staged["clocks"], PartitionClock.from_dict, PartitionClock.to_dict),
        bounds,
    )
    job_glue = JobGlue(
        policy,
        names,
        CodecTable(staged["job-states"], JobState.from_dict, JobState.to_dict),
        CodecTable(staged["job-progress"], Progress.from_dict, Progress.to_dict),
        CodecTable(staged["progress-clocks"], ProgressClock.from_dict, ProgressClock.to_dict),
        idle_after_ms=int(settings.idle_after_s * 1000),
        lagging=lagging,
        bounds=bounds,
    )

    async def send(out: Out) -> Awaitable[Any]:
        """Queue `out` with the producer; the result resolves once the broker has it."""
        target = outputs.get(out.topic) or topic(out.topic)
        outputs[out.topic] = target
        delivered = await target.send(key=out.key, value=out.value, partition=out.partition)
        metrics.sent(logical(out.topic))
        return cast("Awaitable[Any]", delivered)

    async def drive(stream: Any, glue: NodeGlue | JobGlue) -> None:
        agent = "node" if isinstance(glue, NodeGlue) else "job"
        tables = node_tables if isinstance(glue, NodeGlue) else job_tables
        async for event in stream.events():
            msg = event.message
            processed[msg.tp] = msg.offset
            try:
                results = glue.handle(msg.topic, msg.partition, msg.offset, msg.key, msg.value)
            except (faust.exceptions.FaustError, KafkaError):
                for state in tables:
                    state.discard()
                # The framework or the broker failed (e.g. a changelog not ready yet): not the
                # record's fault. Crash the agent (CrashingSupervisor stops the worker) so the
                # record is processed again after a restart instead of being dead-lettered.
                log.exception(
                    "Kafka/faust error at %s[%d]@%d", msg.topic, msg.partition, msg.offset
                )
                raise
            except Exception as exc:
                for state in tables:
                    state.discard()
                log.exception("processing %s[%d]@%d failed", msg.topic, msg.partition, msg.offset)
                bad = dead_letter(
                    names,
                    msg.topic,
                    msg.partition,
                    msg.offset,
                    msg.key,
                    msg.value,
                    f"{type(exc).__name__}: {exc}",
                    "process",
                    f"{agent}-agent",
                )
                results = [bad] if bad else []
            delivered = [await send(out) for out in results]
            if delivered:
                await asyncio.gather(*delivered)
            for state in tables:
                state.flush()  # only now: see `staged`
            for out in results:
                if out.decision is not None:
                    metrics.decision(out.decision)
                elif out.alert is not None:
                    metrics.alert(out.alert)
                elif out.topic in dlqs:
                    metrics.dead_letter(logical(msg.topic), _error_kind(out.value))
            if isinstance(glue, NodeGlue) and msg.partition in glue.sides:
                metrics.watermark_at(msg.partition, glue.sides[msg.partition].clock.watermark)
            metrics.record(logical(msg.topic), agent)

    node_channel = topic(names.node_signals, names.nodes_quarantine)
    job_channel = topic(
        names.jobs_events, names.training_telemetry, names.node_evidence, names.ticks
    )
    inputs = {
        names.node_signals,
        names.nodes_quarantine,
        names.ticks,
        names.jobs_events,
        names.training_telemetry,
        names.node_evidence,
    }
    dlqs = {names.dlq(real) for real in inputs if names.spec(real).dlq}

    async def on_revoked(sender: Any, *args: Any, signal: Any, **kwargs: Any) -> None:
        # The glues cache each partition's clock; a partition that comes back may have been
        # moved on by another worker meanwhile: reload it from the (recovered) table.
        revoked: set[TP] = args[0] if args else kwargs.get("revoked", set())
        partitions = {tp.partition for tp in revoked}
        node_glue.forget(partitions)
        job_glue.forget(partitions)

    app.on_partitions_revoked.connect(cast(Any, on_revoked))

    @app.task  # type: ignore[untyped-decorator]
    async def signal_filter() -> None:
        # Started after table recovery. If it fails the worker must stop (like a crashed
        # agent): a live worker whose filter died would decide nothing on node evidence.
        try:
            await signal_loop.run()
        except asyncio.CancelledError:
            raise
        except BaseException as exc:
            log.exception("signal filter failed: stopping the worker")
            await app.crash(exc)

    @app.page("/metrics")
    async def metrics_page(view: Any, request: Any) -> Any:
        # prometheus-client's exposition of our registry on the worker's web server, in the
        # format the scraper asks for (OpenMetrics or text), as its own HTTP server does.
        encode, content_type = choose_encoder(request.headers.get("Accept"))
        return view.bytes(encode(metrics.registry), headers={"Content-Type": content_type})

    @app.agent(node_channel, name="node-evidence", concurrency=1)
    async def node_agent(stream: Any) -> None:
        await drive(stream, node_glue)

    @app.agent(job_channel, name="job-terminations", concurrency=1)
    async def job_agent(stream: Any) -> None:
        await drive(stream, job_glue)

    @app.timer(settings.tick_interval_s, name="clock-ticks")  # type: ignore[untyped-decorator]
    async def ticker() -> None:
        # A tick on every partition lets quiet partitions close their windows (idle advance).
        for partition in range(settings.partitions):
            await outputs[names.ticks].send(key=None, value=TICK, partition=partition)

    return app


def _error_kind(dlq_value: bytes) -> str:
    """The `error_kind` of a dead letter (our own record: see `streams.glue.dead_letter`)."""
    try:
        kind = orjson.loads(dlq_value).get("error_kind")
    except (orjson.JSONDecodeError, AttributeError):
        return "unknown"
    return str(kind)
