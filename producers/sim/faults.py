"""From a drawn incident to what the fleet emits: signals with their times, and the termination.

Pure: `plan(draw, ...)` gives every record's simulated time. Records that come *before* the
failure (a precursor, the unrelated XID of a false-evidence case) are why a plan starts at
`draw.at_ms` and the failure itself (`onset_ms`) may come later: the simulator publishes in time
order, so nothing is ever stamped in the past.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from producers.sim.scenarios import BY_NAME, CONDITION_CLASS, XID_CLASS, Draw

GPUS_PER_NODE = 8


@dataclass(frozen=True, slots=True)
class Timing:
    """Simulated seconds. Defaults: NCCL's 5-minute watchdog, the 10-minute hang timeout of
    docs/producers.md, late XIDs inside the shipped policy's 120 s grace."""

    detect_s: tuple[float, float] = (2.0, 20.0)  # GPU fault -> the job is declared dead
    watchdog_s: float = 300.0  # NCCL timeout after a rank stops
    hang_timeout_s: float = 600.0  # heartbeats stop -> the job is killed with reason Hang
    late_xid_s: tuple[float, float] = (10.0, 90.0)  # XID logged this long after the termination
    precursor_lead_s: tuple[float, float] = (120.0, 480.0)
    false_evidence_lead_s: tuple[float, float] = (30.0, 300.0)
    flood_records: int = 2000
    flood_span_s: float = 40.0


@dataclass(frozen=True, slots=True)
class Signal:
    """One record for gpu.xid or gpu.health. `part` says what it is in the incident:
    fault (the failing node's signal), precursor, spurious (a false-evidence XID), decoy
    (a node outside the job), peer (XID 45 of a healthy peer in an NCCL cascade)."""

    ts_ms: int
    node: str
    kind: str  # xid | health
    code: int | str
    gpu_index: int | None
    cls: str  # the sim's truth class of this signal
    part: str


@dataclass(frozen=True, slots=True)
class Plan:
    onset_ms: int  # the failure happens (the job stops making progress)
    signals: tuple[Signal, ...]
    term_ms: int | None  # None: no job dies
    reason: str | None
    exit_code: int | None
    faulty_node: str | None  # the node that is really broken (hardware) or degraded (precursor)
    spurious_node: str | None  # false-evidence case: the node with the unrelated hardware XID
    flags: tuple[str, ...] = ()  # the hard cases this incident really has


def _secs(rng: random.Random, span: tuple[float, float]) -> int:
    return int(rng.uniform(*span) * 1000)


def _signal(ts: int, node: str, kind: str, code: int | str, gpu: int | None, part: str) -> Signal:
    cls = XID_CLASS.get(int(code), "ignore") if kind == "xid" else CONDITION_CLASS[str(code)]
    return Signal(ts, node, kind, code, gpu, cls, part)


def plan(
    d: Draw,
    rng: random.Random,
    timing: Timing,
    *,
    job_nodes: tuple[str, ...] = (),
    node: str | None = None,
    decoy_node: str | None = None,
) -> Plan:
    """The records of one incident. Job scenarios need `job_nodes` and the faulty `node` (one
    of them; for software/transient failures it only locates an XID 13/31/43); node scenarios
    need `node`. `decoy_node` (outside the job) gets an XID 13/31 when `d.decoy`."""
    s = BY_NAME[d.scenario]
    if node is None:
        raise ValueError(f"scenario {s.name} needs a node")
    signals: list[Signal] = []
    gpu = rng.randrange(GPUS_PER_NODE)
    lead = 0
    if d.precursor:
        lead = _secs(rng, timing.precursor_lead_s)
        signals.append(_signal(d.at_ms, node, "xid", rng.choice((63, 92)), gpu, "precursor"))
    spurious: str | None = None
    if d.false_evidence and job_nodes:
        lead = _secs(rng, timing.false_evidence_lead_s)
        spurious = rng.choice(job_nodes)
        signals.append(_signal(d.at_ms, spurious, "xid", 48, rng.randrange(8), "spurious"))
    onset = d.at_ms + lead

    if s.target == "node":
        part = {"hardware": "fault", "precursor": "precursor"}.get(s.true_class, "decoy")
        code = d.code if d.code is not None else s.codes[0]
        signals.append(_signal(onset, node, s.signal_kind, code, gpu, part))
        faulty = node if part in ("fault", "precursor") else None
        return Plan(onset, tuple(signals), None, None, None, faulty, None, ())

    multi = len(job_nodes) > 1
    stalls = s.reason == "NCCLTimeout" or (d.cascade and multi)
    if s.name == "hang":
        term = onset + int(timing.hang_timeout_s * 1000)
    elif stalls:
        term = onset + int(timing.watchdog_s * 1000)
    else:
        term = onset + _secs(rng, timing.detect_s)
    reason = "NCCLTimeout" if stalls else s.reason

    if s.signal_kind != "none":
        code = d.code if d.code is not None else s.codes[0]
        at = term + _secs(rng, timing.late_xid_s) if d.late_xid else onset
        part = "fault" if s.true_class == "hardware" else "app"
        repeats = timing.flood_records if d.flood and s.signal_kind == "xid" else 1
        step = int(timing.flood_span_s * 1000) // max(1, repeats - 1) if repeats > 1 else 0
        signals.extend(
            _signal(at + i * step, node, s.signal_kind, code, gpu, part) for i in range(repeats)
        )
    if stalls and multi:
        # The healthy ranks are killed at the termination and log preemptive cleanup (XID 45).
        signals.extend(
            _signal(term + _secs(rng, (0.0, 5.0)), peer, "xid", 45, rng.randrange(8), "peer")
            for peer in job_nodes
            if peer != node
        )
    if d.decoy and decoy_node is not None:
        ts = onset + _secs(rng, (0.0, 60.0))
        signals.append(_signal(ts, decoy_node, "xid", rng.choice((13, 31)), 0, "decoy"))
    signals.sort(key=lambda x: x.ts_ms)
    faulty = node if s.true_class == "hardware" else None
    parts = {x.part for x in signals}
    flags = tuple(
        name
        for name, real in (
            ("late_xid", d.late_xid and s.signal_kind != "none"),
            ("cascade", stalls and multi and s.true_class == "hardware"),
            ("flood", len([x for x in signals if x.part in ("fault", "app")]) > 1),
            ("precursor", "precursor" in parts),
            ("decoy", "decoy" in parts),
            ("false_evidence", spurious is not None),
        )
        if real
    )
    return Plan(onset, tuple(signals), term, reason, s.exit_code, faulty, spurious, flags)
