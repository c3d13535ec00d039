"""Why a job was decided the way it was: a timeline built from the topics' records. Pure.

`explain(job_id, records, policy)` takes every record that may concern the job (its own events,
decisions, requeues and alerts; the signals and quarantine records of its nodes) and returns,
per attempt, the decision with the evidence it counted, and the signals of its nodes that were
seen but did not count, each with the reason (the same rules as `streams/engine/`: ignored class,
outside the window, before the node's release, after the decision time, previous tenant). The
Kafka reading (`gpufailover/cli/explain.py`) and the rendering (`streams/explain_render.py`) are
apart, so the same function explains a live cluster and a replayed dump.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from schemas.decisions import Decision
from schemas.errors import SchemaError
from schemas.health import GpuHealth
from schemas.jobs import JobEvent
from schemas.xid import GpuXid
from streams.explain_model import Attempt, Event, Explanation, Signal, SourceRecord
from streams.policy import Policy

__all__ = [
    "NEARBY_MS",
    "Attempt",
    "Event",
    "Explanation",
    "Signal",
    "SourceRecord",
    "class_under",
    "explain",
    "job_nodes",
]

# Signals this far outside an attempt's window are shown as "outside the window"; further out
# they say nothing about it and are left out.
NEARBY_MS = 600_000


@dataclass(slots=True)
class _Job:
    """What the job's own records say, gathered per attempt."""

    events: dict[int, list[JobEvent]] = field(default_factory=dict)
    decisions: dict[int, Decision] = field(default_factory=dict)
    other: list[Event] = field(default_factory=list)  # requeues and alerts, rendered


def job_nodes(job_id: str, records: Iterable[SourceRecord]) -> set[str]:
    """Every node the job's events name (which node-keyed partitions to read)."""
    nodes: set[str] = set()
    for rec in records:
        if rec.topic == "jobs.events" and rec.key == job_id and isinstance(rec.value, dict):
            raw = rec.value.get("nodes")
            if isinstance(raw, list):
                nodes.update(n for n in raw if isinstance(n, str))
        elif rec.topic == "failover.decisions" and isinstance(rec.value, dict):
            raw = rec.value.get("suspect_nodes")
            if rec.key == job_id and isinstance(raw, list):
                nodes.update(n for n in raw if isinstance(n, str))
    return nodes


def explain(
    job_id: str, records: Iterable[SourceRecord], policy: Policy, attempt: int | None = None
) -> Explanation | None:
    """The job's explanation; None when no record names the job (an unknown job)."""
    records = list(records)
    unreadable: list[str] = []
    job = _gather_job(job_id, records, unreadable)
    attempts = sorted(set(job.events) | set(job.decisions))
    if attempt is not None:
        attempts = [a for a in attempts if a == attempt]
    if not attempts:
        return None
    nodes = {n for a in attempts for n in _nodes_of(job, a)}
    releases = _releases(records, nodes)
    signals = _raw_signals(records, nodes, policy, unreadable)
    explained = [_explain_attempt(job, a, signals, releases, policy) for a in attempts]
    timeline = _timeline(job, explained, records, nodes, attempts, unreadable)
    return Explanation(
        job_id=job_id,
        policy=policy.source,
        lookback_ms=policy.lookback_ms,
        grace_ms=policy.grace_ms,
        attempts=tuple(explained),
        timeline=tuple(timeline),
        unreadable=tuple(unreadable),
    )


def _gather_job(job_id: str, records: list[SourceRecord], unreadable: list[str]) -> _Job:
    job = _Job()
    for rec in records:
        if rec.key != job_id:
            continue
        try:
            if rec.topic == "jobs.events":
                event = JobEvent.from_dict(rec.value)
                if event.job_id == job_id:
                    job.events.setdefault(event.attempt, []).append(event)
            elif rec.topic == "failover.decisions":
                decision = Decision.from_dict(rec.value)
                if decision.job_id == job_id:  # one decision per (job, attempt): keep the first
                    job.decisions.setdefault(decision.attempt, decision)
            elif rec.topic == "jobs.requeue":
                job.other.append(_requeue_event(rec.value))
            elif rec.topic == "failover.alerts":
                job.other.append(_alert_event(rec.value))
        except SchemaError as exc:
            unreadable.append(f"{rec.where or rec.topic}: {exc}")
    return job


def _nodes_of(job: _Job, attempt: int) -> tuple[str, ...]:
    nodes: dict[str, None] = {}
    for event in job.events.get(attempt, ()):
        nodes.update(dict.fromkeys(event.nodes))
    decision = job.decisions.get(attempt)
    if decision is not None:
        nodes.update(dict.fromkeys(decision.suspect_nodes))
    return tuple(nodes)


def _field(value: Any, name: str, kind: type) -> Any:
    v = value.get(name) if isinstance(value, dict) else None
    if not isinstance(v, kind) or (isinstance(v, bool) and kind is not bool):
        raise SchemaError(name, f"missing or not a {kind.__name__}")
    return v


def _requeue_event(value: Any) -> Event:
    attempt, next_attempt = _field(value, "attempt", int), _field(value, "next_attempt", int)
    exclude = value.get("exclude_nodes") or []
    text = (
        f"requeue asked: attempt {next_attempt} at priority {value.get('priority')}, "
        f"excluding {', '.join(map(str, exclude)) or 'no node'}"
    )
    return Event(_field(value, "ts_ms", int), "requeue", attempt, None, text)


def _alert_event(value: Any) -> Event:
    kind = _field(value, "kind", str)
    detail = {
        k: v
        for k, v in value.items()
        if k not in ("schema_version", "kind", "job_id", "attempt", "ts_ms")
    }
    extra = ", ".join(f"{k} {v}" for k, v in sorted(detail.items()))
    text = f"alert {kind}" + (f" ({extra})" if extra else "")
    attempt = value.get("attempt")
    attempt = attempt if isinstance(attempt, int) else None
    return Event(_field(value, "ts_ms", int), "alert", attempt, None, text)


def _releases(records: list[SourceRecord], nodes: set[str]) -> dict[str, list[int]]:
    """Release times per node (`nodes.quarantine` state `released`), as the node side keeps."""
    out: dict[str, list[int]] = {}
    for rec in records:
        v = rec.value
        if rec.topic != "nodes.quarantine" or not isinstance(v, dict):
            continue
        node, ts = v.get("node"), v.get("ts_ms")
        if node in nodes and v.get("state") == "released" and isinstance(ts, int):
            out.setdefault(node, []).append(ts)
    return out


def _raw_signals(
    records: list[SourceRecord], nodes: set[str], policy: Policy, unreadable: list[str]
) -> list[Signal]:
    """Every XID and every health condition but `ok` on the job's nodes, classified."""
    out: list[Signal] = []
    for rec in records:
        if rec.topic not in ("gpu.xid", "gpu.health") or rec.key not in nodes:
            continue
        v = rec.value
        try:
            if rec.topic == "gpu.xid":
                xid = GpuXid.from_dict(v)
                code: int | str = xid.xid
                cls = policy.classify_xid(xid.xid) if policy.is_known_xid(xid.xid) else "unknown"
                out.append(
                    Signal(
                        xid.node, xid.gpu_index, "xid", code, cls, xid.ts_ms, xid.ts_ms, xid.count
                    )
                )
            else:
                health = GpuHealth.from_dict(v)
                if health.condition != "ok":  # a sample, not a signal
                    code, cls = health.condition, policy.classify_condition(health.condition)
                    ts = health.ts_ms
                    out.append(
                        Signal(health.node, health.gpu_index, "health", code, cls, ts, ts, 1)
                    )
        except SchemaError as exc:
            unreadable.append(f"{rec.where or rec.topic}: {exc}")
    return out


def _explain_attempt(
    job: _Job, attempt: int, signals: list[Signal], releases: Mapping[str, list[int]], p: Policy
) -> Attempt:
    events = job.events.get(attempt, [])
    started = next((e for e in events if e.type == "started"), None)
    term = next((e for e in events if e.type == "terminated"), None)
    decision = job.decisions.get(attempt)
    nodes = _nodes_of(job, attempt)
    t = term.ts_ms if term is not None else decision.terminated_ts_ms if decision else None
    counted: list[Signal] = []
    not_counted: list[Signal] = []
    window = None if t is None else (t - p.lookback_ms, t + p.grace_ms)
    if decision is not None:
        counted = [
            Signal(
                e.node,
                e.gpu_index,
                e.kind,
                e.code,
                e.cls,
                e.ts_ms,
                e.last_ts_ms or e.ts_ms,
                e.count,
            )
            for e in decision.evidence
        ]
    if t is not None:
        start_of = started.ts_ms if started is not None else None
        for s in signals:
            if s.node not in nodes or not t - p.lookback_ms - NEARBY_MS <= s.first_ts_ms:
                continue
            if s.first_ts_ms > t + p.grace_ms + NEARBY_MS:
                continue
            if decision is not None and any(_folded_into(s, c) for c in counted):
                continue
            why = _why_not(s, t, decision, start_of, releases.get(s.node or "", []), p)
            not_counted.append(Signal(**{**_as_kwargs(s), "why": why}))
    return Attempt(
        attempt=attempt,
        nodes=nodes,
        started_ts_ms=None if started is None else started.ts_ms,
        terminated_ts_ms=t,
        reason=term.reason if term is not None else None,
        exit_code=term.exit_code if term is not None else None,
        decision=decision,
        window=window,
        counted=tuple(counted),
        not_counted=tuple(_group(not_counted)),
        policy_mismatches=tuple(
            f"{c.kind} {c.code} was counted as {c.cls}; {p.source} classes it "
            f"{class_under(c.kind, c.code, p)}"
            for c in counted
            if class_under(c.kind, c.code, p) != c.cls
        ),
    )


def class_under(kind: str, code: int | str, policy: Policy) -> str:
    """The class `policy` gives a signal; "unknown" for an XID code it has no row for."""
    if kind == "xid" and isinstance(code, int):
        return policy.classify_xid(code) if policy.is_known_xid(code) else "unknown"
    if kind == "health":
        return policy.classify_condition(str(code))
    return policy.classify_reason(str(code))


def _as_kwargs(s: Signal) -> dict[str, Any]:
    return {name: getattr(s, name) for name in Signal.__slots__}


def _folded_into(s: Signal, c: Signal) -> bool:
    """A raw signal the decision counted as (part of) its coalesced item `c`."""
    same = (s.node, s.gpu_index, s.kind, s.code) == (c.node, c.gpu_index, c.kind, c.code)
    return same and c.first_ts_ms <= s.first_ts_ms <= c.last_ts_ms


def _why_not(
    s: Signal,
    t: int,
    decision: Decision | None,
    started: int | None,
    releases: list[int],
    p: Policy,
) -> str:
    """Why a signal on the job's node did not count: the engine's rules, in its order."""
    if s.cls == "unknown":
        return "ignored: an XID code the policy has no row for"
    if s.cls == "ignore":
        return f"ignored class: the policy classes {s.kind} {s.code} as ignore"
    if s.first_ts_ms < t - p.lookback_ms:
        ago = (t - s.first_ts_ms) / 1000
        lookback = p.lookback_ms // 1000
        return f"outside the window: {ago:g} s before the termination (lookback {lookback} s)"
    released = [r for r in releases if t - p.lookback_ms <= r < t and s.first_ts_ms <= r]
    if released:
        return f"before the node's release at ts_ms {max(released)}: the repaired fault"
    if s.first_ts_ms > t + p.grace_ms:
        late = (s.first_ts_ms - t) / 1000
        return (
            f"outside the window: {late:g} s after the termination (grace {p.grace_ms // 1000} s)"
        )
    if decision is None:
        return "no decision yet for this attempt"
    if s.first_ts_ms > decision.decided_ts_ms:
        return "after the decision time: the hardware evidence had decided it already"
    if s.cls == "software" and started is not None and s.last_ts_ms < started:
        return "previous tenant: a software fault from before this attempt started on the node"
    return "not in the decision's evidence (read after its window closed, or another policy)"


def _group(signals: list[Signal]) -> list[Signal]:
    """Repeats of one signal with one reason, as one entry with its count and span."""
    groups: dict[tuple[Any, ...], Signal] = {}
    for s in sorted(signals, key=lambda x: x.first_ts_ms):
        key = (s.node, s.gpu_index, s.kind, str(s.code), s.why)
        old = groups.get(key)
        if old is None:
            groups[key] = s
        else:
            groups[key] = Signal(
                **{
                    **_as_kwargs(old),
                    "last_ts_ms": max(old.last_ts_ms, s.last_ts_ms),
                    "count": old.count + s.count,
                }
            )
    return sorted(groups.values(), key=lambda x: (x.first_ts_ms, x.node or "", str(x.code)))


def _timeline(
    job: _Job,
    attempts: list[Attempt],
    records: list[SourceRecord],
    nodes: set[str],
    wanted: list[int],
    unreadable: list[str],
) -> list[Event]:
    events: list[Event] = []
    for a in attempts:
        for e in job.events.get(a.attempt, []):
            events.append(Event(e.ts_ms, "job", a.attempt, None, _job_event_text(e)))
        for s in a.counted:
            if s.node is not None:
                events.append(Event(s.first_ts_ms, "signal", a.attempt, s.node, _signal_text(s)))
        for s in a.not_counted:
            events.append(Event(s.first_ts_ms, "signal", a.attempt, s.node, _signal_text(s)))
        d = a.decision
        if d is not None:
            events.append(Event(d.decided_ts_ms, "decision", a.attempt, None, _decision_text(d)))
    events.extend(e for e in job.other if e.attempt is None or e.attempt in wanted)
    span = _span(attempts)
    for rec in records:
        if rec.topic in ("nodes.quarantine", "failover.quarantine-requests"):
            event = _quarantine_event(rec, nodes, span, unreadable)
            if event is not None:
                events.append(event)
    order = {"job": 0, "signal": 1, "quarantine-request": 2, "quarantine": 3, "decision": 4}
    return sorted(events, key=lambda e: (e.ts_ms, order.get(e.what, 5), e.node or "", e.text))


def _span(attempts: list[Attempt]) -> tuple[int, int] | None:
    """Event times the explained attempts cover, with the margin signals get."""
    times = [
        t
        for a in attempts
        for t in (a.started_ts_ms, a.terminated_ts_ms, a.decision and a.decision.decided_ts_ms)
        if t
    ]
    lows = [a.window[0] for a in attempts if a.window is not None]
    highs = [a.window[1] for a in attempts if a.window is not None]
    if not times:
        return None
    return min([*times, *lows]) - NEARBY_MS, max([*times, *highs]) + NEARBY_MS


def _quarantine_event(
    rec: SourceRecord, nodes: set[str], span: tuple[int, int] | None, unreadable: list[str]
) -> Event | None:
    """A quarantine state (`nodes.quarantine`, any state, printed as it is) or request of one
    of the job's nodes within the attempts' span."""
    v = rec.value
    if rec.key not in nodes or v is None:
        return None
    try:
        node, ts, state = _field(v, "node", str), _field(v, "ts_ms", int), _field(v, "state", str)
    except SchemaError as exc:
        unreadable.append(f"{rec.where or rec.topic}: {exc}")
        return None
    if node not in nodes or span is None or not span[0] <= ts <= span[1]:
        return None
    evidence = v.get("evidence") or []
    first = evidence[0] if evidence and isinstance(evidence[0], dict) else None
    because = f", {first.get('kind')} {first.get('code')}" if first else ""
    job = v.get("job_id")
    names = f" for job {job}" if job else ", names no job"
    if rec.topic == "failover.quarantine-requests":
        text = f"quarantine requested ({v.get('reason')}{because}){names}"
        return Event(ts, "quarantine-request", None, node, text)
    return Event(ts, "quarantine", None, node, f"node {state} ({v.get('reason')}{because}){names}")


def _job_event_text(e: JobEvent) -> str:
    parts = [e.type]
    if e.reason:
        parts.append(f"reason {e.reason}")
    if e.exit_code is not None:
        parts.append(f"exit code {e.exit_code}")
    if e.nodes:
        parts.append(f"on {', '.join(e.nodes)}")
    return " ".join(parts)


def _signal_text(s: Signal) -> str:
    gpu = f" GPU {s.gpu_index}" if s.gpu_index is not None else ""
    times = f" x{s.count}" if s.count > 1 else ""
    head = f"{s.kind} {s.code}{gpu} ({s.cls}){times}"
    return f"{head}: counted" if s.why is None else f"{head}: not counted, {s.why}"


def _decision_text(d: Decision) -> str:
    suspects = ", ".join(d.suspect_nodes) or "none"
    nxt = f", next attempt {d.next_attempt}" if d.next_attempt is not None else ""
    return (
        f"decided {d.verdict} -> {d.action} by rule {d.rule} (status {d.status}{nxt}); "
        f"suspects {suspects}"
    )
