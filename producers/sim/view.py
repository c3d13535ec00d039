"""The live terminal view: a progress bar, the fleet grid, the latest decisions.

On a terminal it redraws in place with plain ANSI codes; elsewhere (a pipe, CI) it prints one
status line every `plain_every_s` seconds instead.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TextIO

from producers.sim.runner import RunState
from producers.sim.truth import Seen, visible_verdict

RESET, DIM, BOLD = "\x1b[0m", "\x1b[2m", "\x1b[1m"
GREEN, RED, YELLOW, CYAN = "\x1b[32m", "\x1b[31m", "\x1b[33m", "\x1b[36m"
HOME_CLEAR = "\x1b[H\x1b[J"
ROW = 16


def clock(ms: int, start_ms: int) -> str:
    s = max(0, (ms - start_ms) // 1000)
    return f"{s // 3600:02d}:{s // 60 % 60:02d}:{s % 60:02d}"


def bar(fraction: float, width: int = 40) -> str:
    full = int(max(0.0, min(1.0, fraction)) * width)
    return "█" * full + "░" * (width - full)


def node_cell(state: RunState, node: str, color: bool) -> str:
    e = state.engine
    if node in e.quarantined:
        glyph, c = "Q", RED
    elif node in e.broken:
        glyph, c = "!", YELLOW
    elif node in e.job_on:
        glyph, c = "█", GREEN
    else:
        glyph, c = "·", DIM
    return f"{c}{glyph}{RESET}" if color else glyph


def evidence_text(d: Seen, limit: int = 2) -> str:
    parts = [
        f"{node or '-'} {kind} {code}" + (f" x{count}" if count > 1 else "")
        for node, kind, code, count in d.evidence[:limit]
    ]
    more = len(d.evidence) - limit
    return ", ".join(parts) + (f" +{more}" if more > 0 else "") if parts else "no evidence"


def decision_line(state: RunState, d: Seen, color: bool) -> str:
    e = state.engine
    inc = e.by_attempt.get((d.job_id, d.attempt))
    mark = ""
    if inc is not None and inc.term_ms is not None:
        signals = [s for n in inc.nodes for s in e.signals.get(n, ())]
        visible = visible_verdict(inc, signals, e.cfg.lookback_ms, e.cfg.grace_ms)
        ok = (d.verdict, d.suspects) == inc.expected
        symbol = "ok" if ok else ("known false evidence" if visible != inc.expected else "WRONG")
        tint = GREEN if ok else (YELLOW if symbol != "WRONG" else RED)
        mark = (
            f" [{inc.scenario}: {tint}{symbol}{RESET}]" if color else f" [{inc.scenario}: {symbol}]"
        )
    suspects = ",".join(d.suspects) or "-"
    return (
        f"{clock(d.decided_ts_ms, e.start_ms)} {d.job_id}/{d.attempt} {d.verdict}->{d.action}"
        f" suspects {suspects} | {evidence_text(d)}{mark}"
    )


def counters(state: RunState) -> str:
    e = state.engine
    decided = {(d.job_id, d.attempt) for d in e.decisions}
    jobs = [i for i in e.incidents if i.job_id is not None and i.term_wall_ms is not None]
    done = sum((i.job_id, i.attempt) in decided for i in jobs)
    running = sum(1 for j in e.book.jobs.values() if j.state in ("running", "doomed"))
    return (
        f"incidents {len(e.incidents)} (job failures {len(jobs)}, decided {done}) | "
        f"jobs running {running}, queued {len(e.queue)} | quarantines {len(e.quarantines)}"
    )


def render(state: RunState, color: bool = True, decisions: int = 8) -> str:
    e = state.engine
    frac = (e.now_ms - e.start_ms) / max(1, e.end_ms - e.start_ms)
    wall = time.monotonic() - state.wall_started if state.wall_started else 0.0
    head = f"{BOLD}gpufailover demo{RESET}" if color else "gpufailover demo"
    lines = [
        f"{head}  {len(e.nodes)} nodes x 8 GPUs, time x{state.time_scale:g}, phase {state.phase}",
        f"sim {clock(e.now_ms, e.start_ms)} / {clock(e.end_ms, e.start_ms)} "
        f"[{bar(frac)}] {min(frac, 1.0):4.0%}  wall {wall:5.1f} s",
        "",
    ]
    cells = [node_cell(state, n, color) for n in e.nodes]
    lines += ["  " + " ".join(cells[i : i + ROW]) for i in range(0, len(cells), ROW)]
    legend = "█ busy  · idle  Q quarantined  ! broken, not quarantined"
    lines += ["  " + (f"{DIM}{legend}{RESET}" if color else legend), "", counters(state), ""]
    lines.append(f"{CYAN}latest decisions{RESET}" if color else "latest decisions")
    lines += ["  " + decision_line(state, d, color) for d in e.decisions[-decisions:]] or ["  -"]
    return "\n".join(lines)


def plain_line(state: RunState) -> str:
    e = state.engine
    last = e.decisions[-1] if e.decisions else None
    tail = f" | last: {decision_line(state, last, False)}" if last else ""
    stamp = datetime.now(UTC).strftime("%H:%M:%S")
    return (
        f"{stamp} sim {clock(e.now_ms, e.start_ms)}/{clock(e.end_ms, e.start_ms)} "
        f"{state.phase} | busy {len(e.job_on)} quarantined {len(e.quarantined)} | "
        f"{counters(state)}{tail}"
    )


def make_view(out: TextIO, tty: bool, plain_every_s: float = 10.0) -> Callable[[RunState], None]:
    last = [0.0]

    def tick(state: RunState) -> None:
        if tty:
            out.write(HOME_CLEAR + render(state) + "\n")
            out.flush()
            return
        now = time.monotonic()
        if now - last[0] >= plain_every_s:
            last[0] = now
            out.write(plain_line(state) + "\n")
            out.flush()

    return tick
