"""Event time for one agent's partitions: the watermark rule shared by both halves.

- The watermark is the largest `ts_ms` seen on the partition's input topics, except that it
  waits for an input topic that still has unprocessed records (faust reads topics at uneven
  speeds; a backfill must not close windows on one topic's time while another is behind).
- When a partition has received nothing for `idle_after`, ticks move its watermark on by the
  wall-clock time that passed (the idle advance), so a quiet stream still decides.
"""

from __future__ import annotations

import time
from collections.abc import Callable

Lagging = Callable[[str, int], bool]


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def never_lagging(topic: str, partition: int) -> bool:
    return False


class InputClock:
    def __init__(
        self, sources: tuple[str, ...], idle_after_ms: int, lagging: Lagging = never_lagging
    ) -> None:
        self.sources = sources
        self.idle_after_ms = idle_after_ms
        self.lagging = lagging
        self.source_max: dict[int, dict[str, int]] = {}
        # Wall-clock bookkeeping for the idle advance (memory only: after a restart the first
        # tick restarts the idle timer, which only delays closing a little).
        self.last_record_wall: dict[int, int] = {}
        self.watermark_at_record: dict[int, int | None] = {}

    def observe(self, partition: int, topic: str, ts_ms: int) -> int | None:
        """A record of `topic` at `ts_ms`: the partition's watermark now (None: not yet)."""
        seen = self.source_max.setdefault(partition, {})
        if ts_ms > seen.get(topic, ts_ms - 1):
            seen[topic] = ts_ms
        watermark: int | None = max(seen.values())
        for source in self.sources:
            if watermark is not None and self.lagging(source, partition):
                behind = seen.get(source)
                watermark = None if behind is None else min(watermark, behind)
        return watermark

    def record_done(self, partition: int, watermark: int | None) -> None:
        self.last_record_wall[partition] = now_ms()
        self.watermark_at_record[partition] = watermark

    def idle_target(self, partition: int, watermark: int | None) -> int | None:
        """On a tick: the watermark the idle advance moves to, or None if not idle."""
        wall = now_ms()
        last = self.last_record_wall.setdefault(partition, wall)
        base = self.watermark_at_record.get(partition, watermark)
        idle = wall - last
        if base is None or idle < self.idle_after_ms:
            return None
        return base + idle
