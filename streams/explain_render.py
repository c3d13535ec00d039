"""`gpufailover explain` output: the explanation as text for a person, or as JSON."""

from __future__ import annotations

from datetime import UTC, datetime

import orjson

from streams.explain import Attempt, Explanation, Signal


def iso(ts_ms: int) -> str:
    """UTC, to the millisecond, with a Z: the timeline's times line up."""
    when = datetime.fromtimestamp(ts_ms / 1000, tz=UTC)
    return when.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ts_ms % 1000:03d}Z"


def to_json(explanation: Explanation) -> str:
    return orjson.dumps(explanation.to_dict(), option=orjson.OPT_INDENT_2).decode()


def to_text(x: Explanation) -> str:
    lines = [
        f"job {x.job_id}: {len(x.attempts)} attempt(s); policy {x.policy} "
        f"(lookback {x.lookback_ms // 1000} s, grace {x.grace_ms // 1000} s)",
        "",
        "timeline (UTC):",
    ]
    for e in x.timeline:
        attempt = f"attempt {e.attempt}" if e.attempt is not None else ""
        lines.append(f"  {iso(e.ts_ms)}  {attempt:<10} {e.node or '-':<14} {e.text}")
    for a in x.attempts:
        lines.append("")
        lines.extend(_attempt(a))
    if x.unreadable:
        lines.append("")
        lines.append(f"unreadable records skipped ({len(x.unreadable)}):")
        lines.extend(f"  {u}" for u in x.unreadable)
    return "\n".join(lines)


def _attempt(a: Attempt) -> list[str]:
    d = a.decision
    if d is None:
        head = "no decision"
        if a.terminated_ts_ms is None:
            head += " (not terminated)"
    else:
        head = f"{d.verdict} -> {d.action} by rule {d.rule}"
    lines = [f"attempt {a.attempt}: {head}"]
    if a.terminated_ts_ms is not None:
        reason = f", reason {a.reason}" if a.reason else ", no reason given"
        lines.append(f"  terminated {iso(a.terminated_ts_ms)} on {len(a.nodes)} node(s){reason}")
    if d is not None:
        later = (d.decided_ts_ms - d.terminated_ts_ms) / 1000
        suspects = ", ".join(d.suspect_nodes) or "none"
        lines.append(
            f"  decided at {iso(d.decided_ts_ms)} ({later:g} s after the termination); "
            f"status {d.status}; suspects {suspects}"
        )
    if a.window is not None:
        lines.append(f"  window {iso(a.window[0])} .. {iso(a.window[1])}")
    if d is not None:
        lines.append(f"  counted ({len(a.counted)}):")
        lines.extend(f"    {_signal(s)}" for s in a.counted)
    if a.not_counted:
        lines.append(f"  seen but not counted ({len(a.not_counted)}):")
        lines.extend(f"    {_signal(s)}: {s.why}" for s in a.not_counted)
    if a.policy_mismatches:
        lines.append(
            "  the classifier ran another policy (pass its --policy); the reasons above are "
            "this policy's:"
        )
        lines.extend(f"    {m}" for m in a.policy_mismatches)
    return lines


def _signal(s: Signal) -> str:
    where = s.node or "job"
    gpu = f" GPU {s.gpu_index}" if s.gpu_index is not None else ""
    times = f" x{s.count} until {iso(s.last_ts_ms)}" if s.count > 1 else ""
    return f"{where}{gpu} {s.kind} {s.code} ({s.cls}) at {iso(s.first_ts_ms)}{times}"
