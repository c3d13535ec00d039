"""`gpufailover replay FILE --compare NEW_POLICY`: how the decisions over a dump would change.

The dump is replayed under both policies; a decision *changed* when its outcome did (verdict,
action, status, rule, suspects, next attempt) or it exists under one policy only. For each
change, the evidence that flipped it: items whose class differs, or that one policy counts and
the other does not; with none, the policy's other settings (window, budget) did it. The nodes
quarantined under each policy are compared too.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from schemas.decisions import Decision, Evidence
from schemas.topics import Topic
from streams.explain import class_under
from streams.explain_render import iso
from streams.policy import Policy
from streams.replay import QUARANTINE_TOPIC, Replayer

_SETTINGS = ("lookback_ms", "grace_ms", "coalesce_ms", "max_failovers", "hang_after_ms")


@dataclass(frozen=True, slots=True)
class Outcome:
    """The decisions and quarantines of one replay."""

    decisions: dict[tuple[str, int], Decision]
    quarantined: tuple[str, ...]  # nodes, in output order, repeats kept


@dataclass(frozen=True, slots=True)
class Change:
    job_id: str
    attempt: int
    before: Decision | None
    after: Decision | None
    flipped: tuple[str, ...]  # what changed it, one line each

    def to_dict(self) -> dict[str, Any]:
        return {
            "job_id": self.job_id,
            "attempt": self.attempt,
            "before": _outcome_dict(self.before),
            "after": _outcome_dict(self.after),
            "flipped": list(self.flipped),
        }


@dataclass(frozen=True, slots=True)
class Comparison:
    before_policy: str
    after_policy: str
    before: Outcome
    after: Outcome
    changes: tuple[Change, ...]

    @property
    def quarantines_changed(self) -> bool:
        return set(self.before.quarantined) != set(self.after.quarantined)

    @property
    def changed(self) -> bool:
        """A decision changed, or the set of nodes quarantined did (a policy that quarantines
        other nodes changes the fleet even where no job's verdict moves)."""
        return bool(self.changes) or self.quarantines_changed

    def to_dict(self) -> dict[str, Any]:
        return {
            "before_policy": self.before_policy,
            "after_policy": self.after_policy,
            "counts": {
                name: {"before": dict(b), "after": dict(a)} for name, b, a in self._counts()
            },
            "quarantined": {
                "before": sorted(set(self.before.quarantined)),
                "after": sorted(set(self.after.quarantined)),
            },
            "changes": [c.to_dict() for c in self.changes],
        }

    def _counts(self) -> list[tuple[str, Counter[str], Counter[str]]]:
        b, a = self.before.decisions.values(), self.after.decisions.values()
        return [
            ("verdict", Counter(d.verdict for d in b), Counter(d.verdict for d in a)),
            ("action", Counter(d.action for d in b), Counter(d.action for d in a)),
        ]

    def render(self) -> str:
        nb, na = len(self.before.decisions), len(self.after.decisions)
        lines = [
            f"compare: {self.before_policy} -> {self.after_policy}",
            f"decisions: {nb} -> {na}",
        ]
        for name, before, after in self._counts():
            for key in sorted(set(before) | set(after)):
                mark = "" if before[key] == after[key] else "  *"
                lines.append(f"  {name} {key}: {before[key]} -> {after[key]}{mark}")
        qb, qa = set(self.before.quarantined), set(self.after.quarantined)
        moved = [f"+{n}" for n in sorted(qa - qb)] + [f"-{n}" for n in sorted(qb - qa)]
        lines.append(
            f"quarantined nodes: {len(qb)} -> {len(qa)}"
            + (f" ({', '.join(moved)})" if moved else "")
        )
        lines.append(f"changed decisions: {len(self.changes)}")
        for c in self.changes:
            lines.append(
                f"  {c.job_id} attempt {c.attempt}: {_outcome_text(c.before)} => "
                f"{_outcome_text(c.after)}"
            )
            lines.extend(f"    {why}" for why in c.flipped)
        return "\n".join(lines)


def replay_outcome(lines: Sequence[bytes], policy: Policy, now_ms: int | None) -> Outcome:
    decisions: dict[tuple[str, int], Decision] = {}
    quarantined: list[str] = []
    for raw in Replayer(policy, now_ms).run(lines):
        rec = orjson.loads(raw)
        if rec["topic"] == Topic.FAILOVER_DECISIONS:
            d = Decision.from_dict(rec["value"])
            decisions.setdefault((d.job_id, d.attempt), d)
        elif rec["topic"] == QUARANTINE_TOPIC:
            quarantined.append(rec["value"]["node"])
    return Outcome(decisions, tuple(quarantined))


def compare(
    lines: Sequence[bytes], before: Policy, after: Policy, now_ms: int | None = None
) -> Comparison:
    """Replay `lines` under both policies; the decisions whose outcome differs."""
    old, new = replay_outcome(lines, before, now_ms), replay_outcome(lines, after, now_ms)
    changes = []
    for key in sorted(set(old.decisions) | set(new.decisions)):
        b, a = old.decisions.get(key), new.decisions.get(key)
        if b is not None and a is not None and _outcome(b) == _outcome(a):
            continue
        changes.append(Change(key[0], key[1], b, a, _flipped(b, a, before, after)))
    return Comparison(before.source, after.source, old, new, tuple(changes))


def _outcome(d: Decision) -> tuple[Any, ...]:
    return (d.verdict, d.action, d.status, d.rule, d.suspect_nodes, d.next_attempt)


def _outcome_dict(d: Decision | None) -> dict[str, Any] | None:
    if d is None:
        return None
    return {
        "verdict": d.verdict,
        "action": d.action,
        "status": d.status,
        "rule": d.rule,
        "suspect_nodes": list(d.suspect_nodes),
        "next_attempt": d.next_attempt,
    }


def _outcome_text(d: Decision | None) -> str:
    if d is None:
        return "no decision"
    suspects = ", ".join(d.suspect_nodes) or "none"
    return f"{d.verdict} -> {d.action} ({d.rule}; suspects {suspects})"


def _item_key(e: Evidence) -> tuple[Any, ...]:
    return (e.node, e.gpu_index, e.kind, str(e.code), e.ts_ms)


def _describe(e: Evidence) -> str:
    where = e.node or "the job"
    gpu = f" GPU {e.gpu_index}" if e.gpu_index is not None else ""
    return f"{e.kind} {e.code} on {where}{gpu} at {iso(e.ts_ms)}"


def _flipped(
    b: Decision | None, a: Decision | None, before: Policy, after: Policy
) -> tuple[str, ...]:
    old = {_item_key(e): e for e in (b.evidence if b else ())}
    new = {_item_key(e): e for e in (a.evidence if a else ())}
    out: list[str] = []
    for key in sorted(set(old) | set(new), key=str):
        o, n = old.get(key), new.get(key)
        if o is not None and n is not None:
            if o.cls != n.cls:
                out.append(f"{_describe(o)}: {o.cls} -> {n.cls}")
        elif o is not None:
            out.append(
                f"{_describe(o)}: no longer counted (now {class_under(o.kind, o.code, after)})"
            )
        elif n is not None:
            was = class_under(n.kind, n.code, before)
            out.append(f"{_describe(n)}: now counted as {n.cls} (was {was})")
    if not out:
        settings = [
            f"{name} {getattr(before, name)} -> {getattr(after, name)}"
            for name in _SETTINGS
            if getattr(before, name) != getattr(after, name)
        ]
        why = "; ".join(settings) if settings else "the same evidence, another rule"
        out.append(f"no evidence changed class: {why}")
    return tuple(out)
