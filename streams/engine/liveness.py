"""When a node's agent was heard from, and whether it was silent at a given event time. Pure.

A node keeps *runs*: spans [first, last] of heartbeats (`heartbeat` and `nvml_hung` health
records) no more than `silent_after_ms` apart. Runs are built from the set of heartbeat times,
so the order in which heartbeats (or the signal filter's folds of them) arrive does not change
them. The agent is silent at time t when its last heartbeat at or before t is more than
`silent_after_ms` older than t; a node never heard from before t is not silent (it may run no
agent at all).
"""

from __future__ import annotations

MAX_RUNS = 8  # runs kept per node: the oldest are forgotten first
Run = tuple[int, int]  # (first, last) ts_ms


def heard(runs: list[Run], first_ms: int, last_ms: int, silent_after_ms: int) -> bool:
    """Add heartbeats seen from `first_ms` to `last_ms` to `runs` (sorted, disjoint, in place).

    Every run linked to the new span (a gap of at most `silent_after_ms`) merges with it.
    Returns whether `runs` changed.
    """
    lo, hi = first_ms, last_ms
    keep: list[Run] = []
    for run in runs:
        if run[0] - hi <= silent_after_ms and lo - run[1] <= silent_after_ms:
            lo, hi = min(lo, run[0]), max(hi, run[1])
        else:
            keep.append(run)
    if (lo, hi) in runs:
        return False  # inside a run already (runs are disjoint: no other one merged)
    keep.append((lo, hi))
    keep.sort()
    runs[:] = keep[-MAX_RUNS:]
    return True


def prune(runs: list[Run], horizon_ms: int) -> bool:
    """Forget runs that ended before `horizon_ms`, but never the latest one (it says since
    when the agent is silent). Returns whether `runs` changed."""
    if len(runs) > 1 and runs[0][1] < horizon_ms:
        latest = runs[-1]
        runs[:] = [r for r in runs[:-1] if r[1] >= horizon_ms] + [latest]
        return True
    return False


def silent_since(runs: list[Run], at_ms: int, silent_after_ms: int) -> int | None:
    """The event time from which the agent counts as silent at `at_ms`, or None when it is
    not silent then (heard within `silent_after_ms` before it, or never heard before it)."""
    last: int | None = None
    for first, end in runs:
        if first > at_ms:
            break
        last = end
    if last is None or at_ms - last <= silent_after_ms:
        return None
    return last + silent_after_ms
