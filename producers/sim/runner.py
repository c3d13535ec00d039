"""Drive the engine in scaled wall-clock time against Kafka, until the run and its drain end.

Simulated time = start + wall time elapsed x `time_scale`. Every pass publishes the records
due, then feeds the engine what the pipeline published. At the end of the run the effective
training time is frozen; simulated time keeps flowing (node agents keep reporting `ok`, which
moves the classifier's event-time watermark) until every termination has its decision or the
drain times out.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from producers.sim.bus import Bus, wall_ms
from producers.sim.engine import SimEngine
from producers.sim.faults import Signal
from producers.sim.records import Out, job_out, signal_out
from producers.sim.results import EttSnapshot, freeze_ett
from producers.sim.truth import Seen
from schemas.jobs import JobEvent
from schemas.topics import Topic

CANARY_JOB, CANARY_NODE = "canary", "canary-node"
PACE_S = 0.05  # longest sleep between passes


@dataclass
class RunState:
    """What the live view and the report read while the run goes on."""

    engine: SimEngine
    time_scale: float
    phase: str = "starting"  # starting | running | draining | done | interrupted
    wall_started: float = 0.0
    ett: EttSnapshot | None = None
    alerts: Counter[str] = field(default_factory=Counter)
    timeline: list[tuple[int, int, int, int, int]] = field(default_factory=list)
    drain_s: float = 0.0
    stopped: str | None = None  # why the run ended early, if it did

    def outstanding(self) -> int:
        """Terminations published (or due) that have no decision yet."""
        decided = {(d.job_id, d.attempt) for d in self.engine.decisions}
        return sum(
            1
            for i in self.engine.incidents
            if i.job_id is not None
            and i.term_ms is not None
            and (i.job_id, i.attempt) not in decided
        )


def seen_from(value: dict[str, Any]) -> Seen:
    evidence = tuple(
        (e.get("node"), str(e.get("kind")), e.get("code", ""), int(e.get("count", 1)))
        for e in value.get("evidence", [])
    )
    return Seen(
        str(value["job_id"]), int(value["attempt"]), str(value["verdict"]), str(value["action"]),
        tuple(value.get("suspect_nodes", [])), evidence, wall_ms(), int(value["decided_ts_ms"]),
    )  # fmt: skip


async def wait_ready(bus: Bus, ts_ms: int, timeout_s: float, node: str = CANARY_NODE) -> None:
    """End to end: an XID 79 and a termination on a canary node must come back as a decision,
    a quarantine, a requeue command and a job status (all four services are up). On a real
    scheduler `node` is one of its nodes (the actuator must find it); the caller releases it."""
    xid = Signal(ts_ms, node, "xid", 79, 0, "hardware", "fault")
    term = JobEvent(CANARY_JOB, 0, "terminated", ts_ms + 1000, nodes=(node,))
    await bus.publish([signal_out(xid), job_out(term)])
    want = {Topic.FAILOVER_DECISIONS, Topic.NODES_QUARANTINE, Topic.JOBS_REQUEUE, Topic.JOBS_STATUS}
    async with asyncio.timeout(timeout_s):
        while want:
            for topic, key, _ in await bus.poll(200):
                if key in (CANARY_JOB, node):
                    want.discard(topic)


def sample(state: RunState) -> None:
    """(sim ms, busy, idle, quarantined, broken) with each node counted once: quarantined
    first, then busy (a job or its epilog), then broken and not quarantined, then idle."""
    e = state.engine
    quarantined = len(e.quarantined)
    busy = sum(1 for n in e.job_on if n not in e.quarantined)
    broken = sum(1 for n in e.broken if n not in e.quarantined and n not in e.job_on)
    idle = len(e.nodes) - quarantined - busy - broken
    state.timeline.append((e.now_ms, busy, idle, quarantined, broken))


async def run(
    state: RunState,
    bus: Bus,
    *,
    drain_timeout_s: float,
    on_tick: Callable[[RunState], None] | None = None,
    should_stop: Callable[[], str | None] = lambda: None,
    tick_s: float = 0.5,
) -> RunState:
    engine = state.engine
    scale = state.time_scale
    state.phase, state.wall_started = "running", time.monotonic()
    last_tick = last_sample = 0.0
    drain_deadline: float | None = None
    drain_started = 0.0
    while True:
        now = time.monotonic()
        sim_now = engine.start_ms + int((now - state.wall_started) * scale * 1000)
        if state.phase == "running" and sim_now >= engine.end_ms:
            await bus.publish(engine.advance(engine.end_ms))
            state.ett = freeze_ett(engine, engine.end_ms)
            state.phase, drain_deadline, drain_started = "draining", now + drain_timeout_s, now
        await bus.publish(engine.advance(sim_now))
        for topic, _, value in await bus.poll(0):
            await bus.publish(react(state, topic, value))
        if now - last_sample >= 1.0:
            sample(state)
            last_sample = now
        if on_tick is not None and now - last_tick >= tick_s:
            on_tick(state)
            last_tick = now
        if drain_deadline is not None:
            state.drain_s = now - drain_started
            if state.outstanding() == 0 or now >= drain_deadline:
                break
        state.stopped = should_stop()
        if state.stopped is not None:
            if state.ett is None:
                state.ett = freeze_ett(engine, engine.now_ms)
            state.phase = "interrupted"
            break
        nxt = engine.next_event_ms()
        wait = PACE_S if nxt is None else (nxt - sim_now) / (scale * 1000)
        await asyncio.sleep(min(PACE_S, max(0.0, wait)))
    await bus.flush()
    if on_tick is not None:
        on_tick(state)
    if state.stopped is None:
        state.phase = "done"
    return state


def react(state: RunState, topic: str, value: dict[str, Any]) -> list[Out]:
    engine = state.engine
    if topic == Topic.FAILOVER_DECISIONS:
        return engine.on_decision(seen_from(value))
    if topic == Topic.JOBS_REQUEUE:
        return engine.on_requeue(value)
    if topic == Topic.NODES_QUARANTINE:
        return engine.on_quarantine(value)
    if topic == Topic.FAILOVER_ALERTS:
        kind = str(value.get("kind", "?"))
        state.alerts[f"{kind}:{value.get('state')}" if kind == "breaker" else kind] += 1
    return []
