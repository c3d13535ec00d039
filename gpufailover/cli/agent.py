"""`gpufailover agent --source nvml|kmsg|journal|file:PATH`: the GPU node agent."""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any

from producers import validation_gate
from producers.agent_config import AgentSettings, add_arguments, settings_from_args

log = logging.getLogger(__name__)

EXIT_BAD_ARGS = 2


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "agent",
        help="GPU node agent: publish XIDs and health changes (gpu.xid, gpu.health)",
        description="Watch this node's GPUs through NVML or the kernel log and publish XID "
        "events and health-condition changes, keyed by node. Runs until SIGTERM/SIGINT.",
    )
    add_arguments(parser)
    validation_gate.add_arguments(parser)
    parser.set_defaults(func=cmd_agent)


def _err(message: str) -> None:
    print(f"gpufailover agent: {message}", file=sys.stderr)


def cmd_agent(args: argparse.Namespace) -> int:
    from producers.metrics import AgentMetrics
    from schemas.topics import TopicNames, validate_prefix

    try:
        settings = settings_from_args(args)
        topics = TopicNames(validate_prefix(settings.topic_prefix or ""))
        gate = validation_gate.gate_settings(args, settings.source)
    except ValueError as exc:
        _err(f"error: {exc}")
        return EXIT_BAD_ARGS
    from producers.spool import Spool, SpoolError

    metrics = AgentMetrics()
    try:
        spool = Spool(
            settings.spool_path(),
            metrics,
            max_records=settings.buffer_size,
            max_bytes=settings.spool_max_bytes,
            sync=settings.spool_sync,
        )
    except SpoolError as exc:
        _err(f"{exc} (--spool-dir sets where it is; 'none' keeps events in memory only)")
        return 1
    try:
        return _with_spool(settings, topics, metrics, spool, gate)
    finally:
        spool.close()


def _with_spool(
    settings: AgentSettings, topics: Any, metrics: Any, spool: Any, gate: Any = None
) -> int:
    from producers.nvml_source import NvmlError, NvmlUnavailable

    if len(spool):
        log.info("%d events from an earlier run wait in %s: sent first", len(spool), spool.where)
    try:
        sources, cleanup, cursor = build_sources(settings, metrics, spool)
    except NvmlUnavailable as exc:
        _err(
            f"NVML is not available on this machine ({exc}). The nvml source needs the NVIDIA "
            "driver (libnvidia-ml.so.1) and access to the GPUs; where it is missing use "
            "--source kmsg, journal or file:PATH."
        )
        return 1
    except NvmlError as exc:
        _err(f"NVML failed to start: {exc}")
        return 1
    from producers.metrics import serve_metrics

    try:
        serve_metrics(metrics, settings.metrics_port, settings.metrics_host)
        return asyncio.run(_run(settings, topics, metrics, sources, spool, cursor, gate))
    except OSError as exc:
        _err(f"cannot serve metrics on port {settings.metrics_port}: {exc}")
        return 1
    finally:
        cleanup()


def build_sources(
    settings: AgentSettings, metrics: Any, spool: Any
) -> tuple[list[Any], Callable[[], None], Any]:
    """The configured source, what to call when the agent stops, and the kernel-log cursor
    tracker (/dev/kmsg only, else None)."""
    from producers.kmsg import GpuDirectory, KernelLogSource
    from producers.kmsg_resume import kmsg_start
    from producers.nvml_source import PynvmlBackend
    from producers.nvml_watch import NvmlSource

    if settings.source == "nvml":
        backend = PynvmlBackend()
        backend.init()
        source = NvmlSource(
            backend,
            settings.node,
            interval_s=settings.sample_interval_s,
            thresholds=settings.thresholds,
            hang_timeout_s=settings.nvml_hang_timeout_s,
        )
        gpus = source.start()
        log.info("NVML: %d GPUs: %s", len(gpus), ", ".join(f"{g.index}={g.uuid}" for g in gpus))
        return [source], backend.shutdown, None

    directory = _directory_from_nvml(GpuDirectory())
    from_start, resume_after, cursor = settings.from_start, None, None
    if settings.source == "kmsg":
        point, cursor = kmsg_start(spool, settings.kmsg_path, settings.from_start)
        from_start, resume_after = point.from_start, point.after_seq
    source_log = KernelLogSource(
        settings.source,
        _follower(settings, from_start),
        settings.node,
        directory,
        metrics,
        kernel_time=settings.source == "kmsg",
        sequenced=settings.source == "kmsg",
        resume_after=resume_after,
    )
    return [source_log], lambda: None, cursor


def _follower(
    settings: AgentSettings, from_start: bool
) -> Callable[[threading.Event], Iterator[str]]:
    from producers import kmsg_follow

    path = settings.file_path()
    if path is not None:
        return lambda stop: kmsg_follow.follow_file(path, stop, from_start=from_start)
    if settings.source == "kmsg":
        device = settings.kmsg_path
        return lambda stop: kmsg_follow.follow_kmsg(stop, device, from_start=from_start)
    return lambda stop: kmsg_follow.follow_journal(stop)


def _directory_from_nvml(directory: Any) -> Any:
    """Fill the PCI -> GPU directory from NVML when it works here; quietly skip when not."""
    from producers.nvml_source import NvmlError, PynvmlBackend
    from producers.nvml_watch import enumerate_gpus

    backend = PynvmlBackend()
    try:
        backend.init()
    except NvmlError as exc:
        log.info("NVML not available (%s): GPU identity from kernel-log lines only", exc)
        return directory
    try:
        for gpu in enumerate_gpus(backend):
            if gpu.pci_bus_id:
                directory.learn(gpu.pci_bus_id, uuid=gpu.uuid, index=gpu.index)
    finally:
        backend.shutdown()
    return directory


async def _run(
    settings: AgentSettings,
    topics: Any,
    metrics: Any,
    sources: list[Any],
    spool: Any,
    cursor: Any,
    gate: Any = None,
) -> int:
    from gpufailover.kafka import make_producer
    from gpufailover.settings import default_bootstrap
    from producers.agent import Agent
    from producers.heartbeat import Heartbeat
    from producers.publisher import BufferedPublisher

    bootstrap = settings.bootstrap or default_bootstrap()
    publisher = BufferedPublisher(
        lambda: make_producer(
            bootstrap, f"gpufailover-agent-{settings.node}", security=settings.security
        ),
        spool,
        metrics,
    )
    agent = Agent(
        topics,
        publisher,
        metrics,
        dedup_window_s=settings.dedup_window_s,
        drain_timeout_s=settings.drain_timeout_s,
        cursor=cursor,
        heartbeat=Heartbeat(
            settings.node,
            settings.heartbeat_interval_s,
            [s.stuck for s in sources if callable(getattr(s, "stuck", None))],
        ),
    )
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, agent.stop)
    log.info(
        "agent on node %s: source %s -> %s (%s, %s), spool %s",
        settings.node,
        settings.source,
        bootstrap,
        topics.gpu_xid,
        topics.gpu_health,
        spool.where,
    )
    if gate is not None and gate.enabled:  # the validation gate: producers/validation_gate.py
        follower = validation_gate.ValidationGate(
            settings.node,
            topics,
            lambda item: publisher.accept([item]),
            validation_gate.make_runner(gate),
        )
        run = agent.run(sources)
        status = await validation_gate.run_agent_with_gate(
            run, follower, bootstrap, settings.security
        )
    else:
        status = await agent.run(sources)
    log.info("agent stopped (exit %d)", status)
    return status
