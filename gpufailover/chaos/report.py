"""The chaos run's table (one row per round and a total) and its JSON form."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from gpufailover.chaos.check import (
    DEAD_LETTERS_REDELIVERED,
    INFORMATION,
    NO_ROUND,
    REDELIVERED,
    REQUEUES_SUPERSEDED,
    VIOLATIONS,
    Finding,
    Result,
)

# Short column heads, in the order of check.VIOLATIONS, then the redeliveries.
HEADS: dict[str, str] = {
    "decisions missing": "d.miss",
    "decisions duplicated": "d.dup",
    "decisions different": "d.diff",
    "quarantines missing": "q.miss",
    "quarantines false": "q.false",
    "quarantines duplicated": "q.dup",
    "requeues missing": "rq.miss",
    "requeues duplicated": "rq.dup",
    "requeues false": "rq.false",
    "dead letters missing": "dl.miss",
    "dead letters duplicated": "dl.dup",
    "dead letters false": "dl.false",
    "overdue decisions": "overdue",
    "stalled partitions": "stalled",
    REDELIVERED: "redeliv",
    REQUEUES_SUPERSEDED: "rq.super",
    DEAD_LETTERS_REDELIVERED: "dl.redeliv",
}


@dataclass(frozen=True, slots=True)
class FaultDone:
    """A fault as it was carried out (or skipped, with why)."""

    round: int
    at_s: float  # seconds since the first round began
    kind: str
    target: str
    outcome: str  # "done" or why it was skipped
    wall_ms: int = 0  # when it was carried out (epoch ms, as Kafka's record timestamps)


@dataclass(frozen=True)
class RoundInfo:
    round: int
    records: int
    terminations: int
    started_s: float  # seconds since the first round began
    wall_ms: int = 0  # when its publishing began (epoch ms, as Kafka's record timestamps)


def table(result: Result, rounds: Sequence[RoundInfo], faults: Sequence[FaultDone]) -> str:
    counts = result.counts()
    cols = [*VIOLATIONS, *INFORMATION]
    head = ["round", "records", "terms", *(HEADS[c] for c in cols), "faults"]
    rows: list[list[str]] = []
    for info in rounds:
        c = counts.get(info.round, Counter())
        done = [f"{f.kind}{'' if f.outcome == 'done' else ' (skipped)'}" for f in faults
                if f.round == info.round]  # fmt: skip
        rows.append(
            [str(info.round), str(info.records), str(info.terminations),
             *(str(c[col]) for col in cols), ", ".join(done) or "-"]
        )  # fmt: skip
    if counts.get(NO_ROUND):
        c = counts[NO_ROUND]
        rows.append(["?", "", "", *(str(c[col]) for col in cols), "(no input round)"])
    total: Counter[str] = Counter()
    for c in counts.values():
        total.update(c)
    rows.append(
        ["total", str(sum(r.records for r in rounds)), str(sum(r.terminations for r in rounds)),
         *(str(total[col]) for col in cols), f"{len(faults)} faults"]
    )  # fmt: skip
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head) - 1)]
    lines = []
    for r in [head, *rows]:
        cells = [r[i].rjust(widths[i]) for i in range(len(widths))]
        lines.append("  ".join([*cells, r[-1]]))
    return "\n".join(lines)


def findings_text(
    result: Result,
    faults: Sequence[FaultDone],
    rounds: Sequence[RoundInfo],
    limit: int = 40,
) -> str:
    """Each violation with the faults that may explain it (see `preceding`)."""
    lines: list[str] = []
    violations = result.violations()
    for f in violations[:limit]:
        where = "r?" if f.round == NO_ROUND else f"r{f.round}"
        lines.append(f"  {f.column}: {where} {f.subject}: {f.detail}")
        lines.append(f"    {preceding(f, faults, rounds)}")
    if len(violations) > limit:
        lines.append(f"  ... {len(violations) - limit} more (see --json)")
    return "\n".join(lines)


def _fault(f: FaultDone) -> str:
    return f"r{f.round} +{f.at_s:.1f}s {f.kind} {f.target}"


def preceding(
    finding: Finding, faults: Sequence[FaultDone], rounds: Sequence[RoundInfo], show: int = 5
) -> str:
    """The faults that may explain a finding: the last one before its input's round began,
    then, for an output that was written (a duplicate, a wrong decision), every fault until it
    was written; for one never written, those of its round and the next."""
    done = [f for f in faults if f.outcome == "done"]
    began = next((r.wall_ms for r in rounds if r.round == finding.round), None)
    if began is None:  # no input round explains it: only the time it was written can
        if finding.wall_ms is None:
            return "after: (no input round, no output to time)"
        before = [f for f in done if f.wall_ms <= finding.wall_ms]
        return "after: " + (_fault(before[-1]) if before else "no fault")
    earlier = [f for f in done if f.wall_ms < began]
    if finding.wall_ms is not None:
        head = f"written {(finding.wall_ms - began) / 1000:.1f} s after its round began"
        during = [f for f in done if began <= f.wall_ms <= finding.wall_ms]
    else:  # a decision may wait for the next round's records to close its window
        head = "never written"
        during = [f for f in faults if finding.round <= f.round <= finding.round + 1]
    shown = [*earlier[-1:], *during]
    more = f" (+{len(shown) - show} more)" if len(shown) > show else ""
    listed = "; ".join(_fault(f) for f in shown[:show]) or "no fault"
    return f"{head}; after: {listed}{more}"


def to_json(
    result: Result,
    rounds: Sequence[RoundInfo],
    faults: Sequence[FaultDone],
    settings: dict[str, Any],
    elapsed_s: float,
) -> dict[str, Any]:
    counts = result.counts()
    total: Counter[str] = Counter()
    for c in counts.values():
        total.update(c)
    return {
        "settings": settings,
        "elapsed_s": round(elapsed_s, 1),
        "expected_decisions": result.expected_decisions,
        "observed_decisions": result.observed_decisions,
        "violations": sum(total[c] for c in VIOLATIONS),
        "total": {c: total[c] for c in [*VIOLATIONS, *INFORMATION]},
        "rounds": [
            {
                "round": r.round,
                "records": r.records,
                "terminations": r.terminations,
                "started_s": round(r.started_s, 1),
                **{c: counts.get(r.round, Counter())[c] for c in [*VIOLATIONS, *INFORMATION]},
            }
            for r in rounds
        ],
        "faults": [
            {
                "round": f.round,
                "at_s": round(f.at_s, 1),
                "kind": f.kind,
                "target": f.target,
                "outcome": f.outcome,
            }
            for f in faults
        ],
        "findings": [
            {
                "column": f.column,
                "round": f.round,
                "subject": f.subject,
                "detail": f.detail,
                "after": preceding(f, faults, rounds),
            }
            for f in result.findings
        ],
    }
