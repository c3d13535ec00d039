"""One demo session on a real Slurm cluster: sbatch jobs, break them, watch the pipeline act.

The caller (`gpufailover demo --scheduler slurm`) owns the broker, the cluster (with slurmctld's
hooks publishing the jobs' `started`/`terminated`) and the pipeline (quarantine with the Slurm
actuator, requeue with the Slurm stage). This loop, in real time: keeps the cluster full of
simulated training jobs, publishes every node's health each second (it moves event time) and
the incidents' XIDs/health records at their time, kills a job by writing the exit code its
script waits for, releases a quarantined node after its repair time, reads the pipeline's
topics and polls Slurm once a second for what it really did.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TextIO

from deploy.topics import TopicNames
from gpufailover.slurm_text import parse_fields
from producers.sim.bus import Bus, wall_ms
from producers.sim.faults import Signal
from producers.sim.records import ok_out, release_out, signal_out
from producers.sim.runner import CANARY_JOB, seen_from, wait_ready
from producers.sim.slurm_fleet import Kill, SlurmFleet
from producers.sim.slurm_report import summarize

POLL_S = 1.0  # Slurm polls and node health records
PACE_S = 0.1


class SlurmCluster(Protocol):
    """What the session needs of a running cluster (deploy.slurm_local's, passed in by the CLI)."""

    @property
    def base(self) -> Path: ...
    @property
    def nodes(self) -> tuple[str, ...]: ...
    def run(self, *argv: str, check: bool = True) -> str: ...
    def sbatch(self, *args: str) -> str: ...


@dataclass(frozen=True)
class SlurmOptions:
    bootstrap: str
    prefix: str
    minutes: float
    seed: int
    mean_gap_s: float
    repair_s: float
    lookback_ms: int
    grace_ms: int
    ready_timeout_s: float = 120.0
    drain_timeout_s: float = 90.0


def job_script(cluster: SlurmCluster) -> str:
    """Runs until the sim writes its exit code for this run (`kill-<job>-<restart>`)."""
    f = f"{cluster.base}/kill-$SLURM_JOB_ID-${{SLURM_RESTART_COUNT:-0}}"  # unset on a first run
    return f'f={f}; while [ ! -e "$f" ]; do sleep 0.2; done; exit "$(cat "$f")"'


def write_kill(cluster: SlurmCluster, kill: Kill) -> None:
    path = cluster.base / f"kill-{kill.job_id}-{kill.attempt}"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(f"{kill.exit_code}\n")
    os.replace(tmp, path)  # the job's script never reads half a file


def snapshot(cluster: SlurmCluster) -> tuple[list[dict[str, str]], list[dict[str, str]]]:
    jobs = cluster.run("scontrol", "-o", "show", "job", check=False).splitlines()
    nodes = cluster.run("scontrol", "-o", "show", "node", check=False).splitlines()
    return [parse_fields(j) for j in jobs if j.strip()], [parse_fields(n) for n in nodes]


async def _ready(
    bus: Bus, cluster: SlurmCluster, opts: SlurmOptions, should_stop: Callable[[], str | None]
) -> None:
    """The pipeline answers end to end (a canary XID on the first node an hour ago), that node
    is drained by the Slurm actuator, then released and back in service."""
    node = cluster.nodes[0]

    async def canary() -> None:
        await wait_ready(bus, wall_ms() - 3_600_000, opts.ready_timeout_s, node=node)
        await _until(cluster, f"{node} drained by the canary", lambda n: _ours(n, node))
        await bus.publish([release_out(node, wall_ms())])
        await bus.flush()
        await _until(cluster, f"{node} back in service", lambda n: _free(n, node))

    task = asyncio.create_task(canary())
    while not task.done():
        reason = should_stop()
        if reason is not None:
            task.cancel()
            raise StopSlurmRun(reason)
        await asyncio.wait({task}, timeout=0.2)
    task.result()


def _ours(nodes: list[dict[str, str]], name: str) -> bool:
    return any(
        n.get("NodeName") == name
        and "DRAIN" in n.get("State", "")
        and n.get("Reason", "").startswith("gpufailover:")
        for n in nodes
    )


def _free(nodes: list[dict[str, str]], name: str) -> bool:
    return any(n.get("NodeName") == name and n.get("State") == "IDLE" for n in nodes)


async def _until(
    cluster: SlurmCluster, what: str, check: Callable[[list[dict[str, str]]], bool]
) -> None:
    try:
        async with asyncio.timeout(60):
            while not check((await asyncio.to_thread(snapshot, cluster))[1]):  # noqa: ASYNC110
                await asyncio.sleep(0.2)  # slurmctld has no events to wait on: poll it
    except TimeoutError:
        raise TimeoutError(f"Slurm: timed out after 60 s waiting for {what}") from None


class StopSlurmRun(Exception):
    """Stopped before the fleet ran (Ctrl-C, SIGTERM, the pipeline exited)."""


async def slurm_session(
    cluster: SlurmCluster,
    opts: SlurmOptions,
    out: TextIO,
    should_stop: Callable[[], str | None],
) -> dict[str, Any]:
    async with Bus(opts.bootstrap, TopicNames(opts.prefix)) as bus:
        wall0 = time.monotonic()
        await _ready(bus, cluster, opts, should_stop)
        ready_s = time.monotonic() - wall0
        out.write(f"pipeline ready and Slurm answering in {ready_s:.1f} s; running the fleet\n")
        out.flush()
        start = wall_ms()
        fleet = SlurmFleet(cluster.nodes, opts.seed, start, opts.mean_gap_s, opts.repair_s)
        stats = await _loop(cluster, bus, fleet, opts, out, should_stop)
        stats.update(ready_s=ready_s, prefix=opts.prefix, seed=opts.seed)
        return summarize(fleet, stats, opts.lookback_ms, opts.grace_ms)


async def _loop(
    cluster: SlurmCluster,
    bus: Bus,
    fleet: SlurmFleet,
    opts: SlurmOptions,
    out: TextIO,
    should_stop: Callable[[], str | None],
) -> dict[str, Any]:
    end_ms = fleet.start_ms + int(opts.minutes * 60_000)
    script = job_script(cluster)
    releases: list[tuple[float, str]] = []  # (monotonic due, node)
    alerts: Counter[str] = Counter()
    submitted = requeue_commands = 0
    started = time.monotonic()
    last_poll = last_view = 0.0
    drain_from: float | None = None
    stopped: str | None = None
    while True:
        now, mono = wall_ms(), time.monotonic()
        running = now < end_ms
        if not running and drain_from is None:
            drain_from = mono
            out.write("run over: waiting for the last decisions and requeues\n")
        if mono - last_poll >= POLL_S:
            last_poll = mono
            await bus.publish([ok_out(n, now) for n in fleet.nodes])
            fleet.observe(*await asyncio.to_thread(snapshot, cluster))
            while running and fleet.room() > 0:
                size = fleet.job_size()
                job_id = await asyncio.to_thread(
                    cluster.sbatch, "-N", str(size), "--gres=gpu:8", "--requeue",
                    "-J", "sim-train", "--wrap", script,
                )  # fmt: skip
                fleet.sizes[job_id] = size
                submitted += 1
        fleet.maybe_incident(now, running)
        for item in fleet.due(now):
            if isinstance(item, Signal):
                await bus.publish([signal_out(item)])
            else:
                await bus.flush()  # the node records before the kill are out first
                await asyncio.to_thread(write_kill, cluster, item)
                fleet.killed(item, wall_ms())
        for topic, key, value in await bus.poll(0):
            if topic == "failover.decisions" and key != CANARY_JOB:
                ts = value.get("terminated_ts_ms")
                fleet.on_decision(seen_from(value), ts if isinstance(ts, int) else None)
            elif topic == "nodes.quarantine":
                node, state = str(value["node"]), str(value["state"])
                delay = fleet.on_quarantine(node, state, int(value["ts_ms"]))
                if delay is not None:
                    releases.append((mono + delay, node))
            elif topic == "jobs.requeue" and key != CANARY_JOB:
                requeue_commands += 1
            elif topic == "failover.alerts":
                alerts[str(value.get("kind", "?"))] += 1
        for due, node in [r for r in releases if r[0] <= mono]:
            releases.remove((due, node))
            await bus.publish([release_out(node, wall_ms())])
            fleet.repaired(node, wall_ms())
        if mono - last_view >= 5.0:
            last_view = mono
            out.write(_status(fleet, mono - started) + "\n")
            out.flush()
        if drain_from is not None and (
            (fleet.outstanding() == 0 and not releases) or mono - drain_from > opts.drain_timeout_s
        ):
            break
        stopped = should_stop()
        if stopped is not None:
            break
        await asyncio.sleep(PACE_S)
    await bus.flush()
    fleet.observe(*await asyncio.to_thread(snapshot, cluster))
    return {
        "wall_s": time.monotonic() - started,
        "drain_s": 0.0 if drain_from is None else time.monotonic() - drain_from,
        "stopped": stopped,
        "submitted": submitted,
        "requeue_commands": requeue_commands,
        "alerts": dict(alerts),
        "published": bus.published,
    }


def _status(fleet: SlurmFleet, elapsed_s: float) -> str:
    running = sum(1 for j in fleet.jobs.values() if j.state == "RUNNING")
    pending = sum(1 for j in fleet.jobs.values() if j.state == "PENDING")
    drained = sorted(fleet.drained_now)
    return (
        f"{elapsed_s:6.1f} s  jobs running {running}, pending {pending}; "
        f"incidents {len(fleet.incidents)}, decisions {len(fleet.decisions)}, "
        f"requeued {len(fleet.requeued)}; drained now {', '.join(drained) or '-'}"
    )
