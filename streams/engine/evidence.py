"""Per-node evidence: coalesced, pruned, bounded. Pure functions over plain lists."""

from __future__ import annotations

from dataclasses import replace

from schemas.bounds import saturating_add
from schemas.decisions import Evidence


def in_window(item: Evidence, start_ms: int, end_ms: int) -> bool:
    """Some occurrence of the (coalesced) item may lie in [start, end]."""
    last = item.ts_ms if item.last_ts_ms is None else item.last_ts_ms
    return last >= start_ms and item.ts_ms <= end_ms


def coalesces(first_ms: int, last_ms: int, ts_ms: int, coalesce_ms: int) -> bool:
    """Does a signal at `ts_ms` join a repeat seen from `first_ms` to `last_ms`? The one rule
    of coalescing: the node side (`add`) and the signal filter's batch folds both use it."""
    return ts_ms - coalesce_ms <= last_ms and ts_ms >= first_ms - coalesce_ms


def add(
    items: list[Evidence], new: Evidence, coalesce_ms: int, cap: int
) -> tuple[Evidence, Evidence | None]:
    """Add `new` to `items` in place; repeats of the same signal within `coalesce_ms` coalesce.

    Returns (the stored item, the item it replaced or None when it is a new entry).
    """
    for i, old in enumerate(items):
        if old.gpu_index == new.gpu_index and old.code == new.code and old.kind == new.kind:
            old_last = old.ts_ms if old.last_ts_ms is None else old.last_ts_ms
            if coalesces(old.ts_ms, old_last, new.ts_ms, coalesce_ms):
                new_last = new.ts_ms if new.last_ts_ms is None else new.last_ts_ms
                merged = replace(
                    old,
                    ts_ms=min(old.ts_ms, new.ts_ms),
                    last_ts_ms=max(old_last, new_last),
                    count=saturating_add(old.count, new.count),
                )
                items[i] = merged
                return merged, old
    items.append(new)
    if len(items) > cap:
        # Hard bound under floods of distinct codes: forget the item seen least recently.
        oldest = min(range(len(items)), key=lambda j: _last(items[j]))
        del items[oldest]
    return new, None


def prune(items: list[Evidence], horizon_ms: int) -> None:
    """Drop, in place, items whose last occurrence is older than `horizon_ms`."""
    if items and min(_last(e) for e in items) < horizon_ms:
        items[:] = [e for e in items if _last(e) >= horizon_ms]


def _last(e: Evidence) -> int:
    return e.ts_ms if e.last_ts_ms is None else e.last_ts_ms
