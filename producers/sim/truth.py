"""Ground truth per injected incident, and the grading of the pipeline's output against it.

A job incident expects exactly one decision for its (job_id, attempt): verdict = its true class,
suspects = the faulty node for hardware, none otherwise. Its *visible* verdict is what the
records the sim published on the job's nodes inside the policy window (and the termination's
reason) say by the mission's precedence. When visible and true disagree, the incident is a
known false-evidence case (the injected "unrelated hardware XID during a software failure", or
an accident of timing): graded apart, and its quarantines do not count as false ones.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from producers.sim.faults import Signal
from producers.sim.scenarios import REASON_CLASS, verdict_of


@dataclass(slots=True)
class Incident:
    incident_id: int
    scenario: str
    true_class: str
    flags: tuple[str, ...]
    onset_ms: int
    job_id: str | None = None
    attempt: int | None = None
    nodes: tuple[str, ...] = ()
    faulty_node: str | None = None
    term_ms: int | None = None
    reason: str | None = None
    primary: bool = True  # drawn from the mix (False: a consequence of an earlier outcome)
    term_wall_ms: int | None = None  # wall clock when the termination was published
    visible: tuple[str, tuple[str, ...]] | None = None  # set by `grade`

    @property
    def expected(self) -> tuple[str, tuple[str, ...]]:
        suspects = (self.faulty_node,) if self.true_class == "hardware" and self.faulty_node else ()
        return self.true_class, suspects

    @property
    def false_evidence(self) -> bool:
        return self.visible is not None and self.visible != self.expected


@dataclass(frozen=True, slots=True)
class Seen:
    """A decision as the sim read it (wall time of reading kept for latency)."""

    job_id: str
    attempt: int
    verdict: str
    action: str
    suspects: tuple[str, ...]
    evidence: tuple[tuple[str | None, str, int | str, int], ...]  # node, kind, code, count
    seen_wall_ms: int
    decided_ts_ms: int


def visible_verdict(
    inc: Incident, signals: Iterable[Signal], lookback_ms: int, grace_ms: int
) -> tuple[str, tuple[str, ...]]:
    assert inc.term_ms is not None
    start, end = inc.term_ms - lookback_ms, inc.term_ms + grace_ms
    nodes = set(inc.nodes)
    classes: set[str] = set()
    hardware: set[str] = set()
    for s in signals:
        if s.node in nodes and start <= s.ts_ms <= end:
            classes.add(s.cls)
            if s.cls == "hardware":
                hardware.add(s.node)
    if inc.reason is not None:
        classes.add(REASON_CLASS.get(inc.reason, "ignore"))
    return verdict_of(classes), tuple(sorted(hardware))


def percentile(values: Sequence[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    k = max(0, min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1))))
    return ordered[k]


@dataclass(slots=True)
class Grade:
    job_incidents: int = 0
    decided: int = 0
    missing: list[int] = field(default_factory=list)  # incident ids without a decision
    duplicated: list[int] = field(default_factory=list)  # more than one decision
    correct: int = 0
    graded: int = 0  # job incidents outside the false-evidence cases
    wrong: list[dict[str, Any]] = field(default_factory=list)
    false_evidence: list[dict[str, Any]] = field(default_factory=list)
    stray_decisions: int = 0  # decisions for (job, attempt) the sim never failed
    latencies_ms: dict[str, list[float]] = field(default_factory=dict)  # by verdict
    by_scenario: dict[str, list[int]] = field(default_factory=dict)  # name -> [correct, graded]

    @property
    def accuracy(self) -> float:
        return self.correct / self.graded if self.graded else 1.0


def grade(
    incidents: Iterable[Incident],
    decisions: Iterable[Seen],
    signals_by_node: Mapping[str, Sequence[Signal]],
    lookback_ms: int,
    grace_ms: int,
) -> Grade:
    by_key: dict[tuple[str, int], list[Seen]] = {}
    for d in decisions:
        by_key.setdefault((d.job_id, d.attempt), []).append(d)
    g = Grade()
    keys: set[tuple[str, int]] = set()
    for inc in incidents:
        if inc.job_id is None or inc.attempt is None or inc.term_ms is None:
            continue
        if inc.term_wall_ms is None:
            continue  # the run stopped before this termination was published
        key = (inc.job_id, inc.attempt)
        keys.add(key)
        g.job_incidents += 1
        signals = [s for n in inc.nodes for s in signals_by_node.get(n, ())]
        inc.visible = visible_verdict(inc, signals, lookback_ms, grace_ms)
        seen = by_key.get(key, [])
        if not seen:
            g.missing.append(inc.incident_id)
        else:
            g.decided += 1
            if len(seen) > 1:
                g.duplicated.append(inc.incident_id)
            first = seen[0]
            g.latencies_ms.setdefault(first.verdict, []).append(
                first.seen_wall_ms - inc.term_wall_ms
            )
        got = (seen[0].verdict, seen[0].suspects) if seen else None
        row = {
            "incident": inc.incident_id,
            "scenario": inc.scenario,
            "flags": list(inc.flags),
            "job": inc.job_id,
            "attempt": inc.attempt,
            "expected": list(inc.expected),
            "visible": list(inc.visible),
            "got": list(got) if got else None,
        }
        if inc.false_evidence:
            g.false_evidence.append(row)
            continue
        g.graded += 1
        score = g.by_scenario.setdefault(inc.scenario, [0, 0])
        score[1] += 1
        if got == inc.expected:
            g.correct += 1
            score[0] += 1
        else:
            g.wrong.append(row)
    g.stray_decisions = sum(len(v) for k, v in by_key.items() if k not in keys)
    return g


def verdict_action_counts(decisions: Iterable[Seen]) -> Counter[tuple[str, str]]:
    return Counter((d.verdict, d.action) for d in decisions)


@dataclass(frozen=True, slots=True)
class Mark:
    """What the sim knows about a node at a time: broken (hardware fault), degraded (precursor),
    spurious (a false-evidence XID), repaired (back to healthy)."""

    ts_ms: int
    kind: str


def classify_quarantine(marks: Sequence[Mark], ts_ms: int, slack_ms: int = 0) -> str:
    """justified | known_false_evidence | false: the node's state when it was quarantined."""
    state = "healthy"
    for m in sorted(marks, key=lambda m: m.ts_ms):
        if m.ts_ms > ts_ms + slack_ms:
            break
        state = "healthy" if m.kind == "repaired" else m.kind
    if state in ("broken", "degraded"):
        return "justified"
    return "known_false_evidence" if state == "spurious" else "false"
