"""One demo session against a running pipeline: wait until it answers, run the fleet, report.

The broker and the pipeline processes are the caller's (`gpufailover demo`); this is the async
part that talks to Kafka.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TextIO

from producers.sim.bus import Bus, wall_ms
from producers.sim.config import SimConfig
from producers.sim.engine import SimEngine
from producers.sim.results import summarize
from producers.sim.runner import RunState, run, wait_ready
from producers.sim.view import make_view
from schemas.topics import TopicNames


@dataclass(frozen=True)
class SessionOptions:
    bootstrap: str
    prefix: str
    time_scale: float
    ready_timeout_s: float = 120.0
    drain_timeout_s: float = 120.0
    tty: bool = False


class StopRun(Exception):
    """The run was stopped early (Ctrl-C, SIGTERM, the pipeline exited)."""


async def session(
    cfg: SimConfig,
    opts: SessionOptions,
    out: TextIO,
    should_stop: Callable[[], str | None],
) -> tuple[dict[str, Any], RunState]:
    """Run the demo; returns (summary, final state). A stop request ends the run early and the
    summary covers what happened until then (`run.stopped` says why)."""
    names = TopicNames(opts.prefix)
    wall0 = time.monotonic()
    async with Bus(opts.bootstrap, names) as bus:
        # The canary and the fleet share the clock: the canary an hour before the fleet starts.
        start_ms = wall_ms() // 1000 * 1000
        ready = asyncio.create_task(wait_ready(bus, start_ms - 3_600_000, opts.ready_timeout_s))
        while not ready.done():
            reason = should_stop()
            if reason is not None:
                ready.cancel()
                raise StopRun(reason)
            await asyncio.wait({ready}, timeout=0.2)
        ready.result()
        ready_s = time.monotonic() - wall0
        out.write(f"pipeline ready in {ready_s:.1f} s; running the fleet\n")
        out.flush()
        engine = SimEngine(cfg, start_ms)
        state = RunState(engine, opts.time_scale)
        await run(
            state,
            bus,
            drain_timeout_s=opts.drain_timeout_s,
            on_tick=make_view(out, opts.tty),
            should_stop=should_stop,
        )
        summary = summarize(engine, state.ett, state.alerts)
        summary["run"] = {
            "seed": cfg.seed,
            "time_scale": opts.time_scale,
            "sim_hours": (min(engine.now_ms, engine.end_ms) - engine.start_ms) / 3.6e6,
            "wall_s": time.monotonic() - state.wall_started,
            "ready_s": ready_s,
            "drain_s": state.drain_s,
            "prefix": opts.prefix,
            "stopped": state.stopped,
            "published": bus.published,
            "finished": datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S UTC"),
        }
        return summary, state
