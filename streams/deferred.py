"""Evidence the node agent holds back while it is behind, so one node's storm does not queue
everyone else's termination behind it (issue 18's flood isolation).

Applying an evidence item costs the node agent a state read, a state write and a changelog
record; a wave over 100,000 nodes is 100,000 of each, and a termination read after it waited
for all of them. While a partition of `failover.node-signals` is more than DEFER_BEHIND
records behind its end, the node agent holds the evidence of nodes no termination waits on
here, per node and in arrival order, and applies it later (oldest node first, in short
turns). It never changes a decision: a node's held evidence is applied
before anything else of that node (a termination, a release) and a node a termination waits
on is never held, so every node's state sees its own records in their order (each item's
pruning measured from the watermark it was read at), and the watermark only reports windows
of nodes whose evidence is all applied. What changes is when a held
node's quarantine request goes out, and the node agent's committed offset, which stays at the
first record with held evidence (`streams.faust_patches.OffsetWatch.cap`) so a crash loses
nothing.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Any

DEFER_BEHIND = 20  # records of the partition not read yet: the node agent is behind
# Held evidence is applied in turns of at most DRAIN_BUDGET_S (after each batch of the node
# agent, and every DRAIN_EVERY_S while any is held), DRAIN_CHUNK items at a time; one node a
# turn while the partition or the signal filter drains a backlog. A turn blocks the worker's
# event loop, and its outputs' acknowledgements hold the node agent's next batch: 20 ms turns
# every 10 ms gave unrelated decisions p50 1.25 s in the flood benchmark, 2 ms turns 0.18 s,
# with the same catch-up (the work is the same; BENCHMARKS.md).
DRAIN_BUDGET_S = 0.005
DRAIN_EVERY_S = 0.05
DRAIN_CHUNK = 50


HeldItem = tuple[dict[str, Any], int | None]


@dataclass(slots=True)
class _Held:
    first_offset: int  # the input record of the node's first held item
    # (`Evidence.to_dict()` form, decoded when applied; the watermark when it was read)
    items: list[HeldItem]


class HeldEvidence:
    """One partition's held evidence: per node, nodes in the order they were first held."""

    def __init__(self) -> None:
        self._by_node: dict[str, _Held] = {}
        # (offset, node) as nodes were first held; an entry whose node was taken since is
        # skipped (its node's `first_offset` differs or it is gone).
        self._arrivals: deque[tuple[int, str]] = deque()
        self.count = 0

    def __contains__(self, node: str) -> bool:
        return node in self._by_node

    def hold(self, node: str, offset: int, item: HeldItem) -> None:
        held = self._by_node.get(node)
        if held is None:
            self._by_node[node] = _Held(offset, [item])
            self._arrivals.append((offset, node))
        else:
            held.items.append(item)
        self.count += 1

    def take(self, node: str) -> list[HeldItem]:
        """`node`'s held items, in order (none held: empty)."""
        held = self._by_node.pop(node, None)
        if held is None:
            return []
        self.count -= len(held.items)
        return held.items

    def first_offset_of(self, node: str) -> int | None:
        held = self._by_node.get(node)
        return None if held is None else held.first_offset

    def put_back(self, node: str, offset: int, items: list[HeldItem]) -> None:
        """Items taken for a record whose handling failed (its writes are rolled back): held
        again, ahead of the node's newer ones. Rare: the arrival order is rebuilt."""
        held = self._by_node.get(node)
        if held is None:
            self._by_node[node] = _Held(offset, list(items))
        else:
            held.items[:0] = items
            held.first_offset = min(held.first_offset, offset)
        self.count += len(items)
        self._arrivals = deque(sorted((h.first_offset, n) for n, h in self._by_node.items()))

    def take_oldest(self, max_items: int) -> list[tuple[str, list[HeldItem]]]:
        """Whole nodes, first held first, until at least one and about `max_items` items."""
        out: list[tuple[str, list[HeldItem]]] = []
        taken = 0
        while self._arrivals and (not out or taken < max_items):
            offset, node = self._arrivals.popleft()
            held = self._by_node.get(node)
            if held is None or held.first_offset != offset:
                continue
            items = self.take(node)
            out.append((node, items))
            taken += len(items)
        return out

    def first_offset(self) -> int | None:
        """The first input offset with an item still held: commits must not pass it."""
        arrivals = self._arrivals
        while arrivals:
            offset, node = arrivals[0]
            held = self._by_node.get(node)
            if held is not None and held.first_offset == offset:
                return offset
            arrivals.popleft()
        return None
