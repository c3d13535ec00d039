"""Event time for one agent's partitions: the watermark rule shared by both halves, and the
persisting of each partition's engine clock (`PersistedClocks`).

- The watermark is the largest `ts_ms` seen on the partition's input topics, except that it
  waits for an input topic that still has unprocessed records (faust reads topics at uneven
  speeds; a backfill must not close windows on one topic's time while another is behind).
- When a partition has received nothing for `idle_after`, ticks move its watermark on by the
  wall-clock time that passed (the idle advance), so a quiet stream still decides.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, MutableMapping
from dataclasses import dataclass, field
from typing import Generic, TypeVar

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

    def candidate(self, partition: int, topic: str, ts_ms: int) -> int:
        """Note a record; the largest ts_ms seen on the partition (before the lag rule).

        Cheap: the hot path uses it to skip the lag check when nothing is due before it.
        """
        seen = self.source_max.get(partition)
        if seen is None:
            seen = self.source_max[partition] = {}
        last = seen.get(topic)
        if last is None or ts_ms > last:
            seen[topic] = ts_ms
        return max(seen.values())

    def effective(self, partition: int) -> int | None:
        """The partition's watermark: the largest ts_ms seen, held back by lagging inputs."""
        seen = self.source_max.get(partition)
        if not seen:
            return None
        watermark: int | None = max(seen.values())
        for source in self.sources:
            if watermark is not None and self.lagging(source, partition):
                behind = seen.get(source)
                watermark = None if behind is None else min(watermark, behind)
        return watermark

    def record_done(self, partition: int, watermark: int | None) -> None:
        """A record was handled. The idle advance starts from the largest ts_ms seen: once the
        partition is idle no input lags, and the engine's own watermark may be kept lazily."""
        self.last_record_wall[partition] = now_ms()
        seen = self.source_max.get(partition)
        self.watermark_at_record[partition] = max(seen.values()) if seen else watermark

    def idle_target(self, partition: int, watermark: int | None) -> int | None:
        """On a tick: the watermark the idle advance moves to, or None if not idle."""
        wall = now_ms()
        last = self.last_record_wall.setdefault(partition, wall)
        base = self.watermark_at_record.get(partition, watermark)
        idle = wall - last
        if base is None or idle < self.idle_after_ms:
            return None
        return base + idle


ClockT = TypeVar("ClockT")
Mark = tuple[int | None, int]  # a clock's watermark and its count of pending wake-ups


@dataclass
class PersistedClocks(Generic[ClockT]):
    """Each partition's engine clock in its table (key `<prefix><partition>`): read once when
    the partition's side is made, written back when it moved.

    A clock is written with the records of a turn that sent outputs (the states it covers go
    with it, so a restarted or new owner resumes from exactly it and the watermark never goes
    back), and whenever its pending wake-ups change or its watermark moves; with `lazy_ms`, a
    moved watermark alone is written at most every `lazy_ms`.
    """

    table: MutableMapping[str, ClockT]
    prefix: str
    new: Callable[[], ClockT]
    mark: Callable[[ClockT], Mark]
    lazy_ms: int = 0
    wall: Callable[[], int] = now_ms
    _persisted: dict[int, Mark] = field(default_factory=dict, init=False)
    _written_wall: dict[int, int] = field(default_factory=dict, init=False)

    def load(self, partition: int) -> ClockT:
        clock = self.table.get(f"{self.prefix}{partition}") or self.new()
        self._persisted[partition] = self.mark(clock)
        return clock

    def save(self, partition: int, clock: ClockT, sent: bool) -> None:
        """After a record or tick of `partition`; `sent`: it produced outputs."""
        mark = self.mark(clock)
        if self.lazy_ms:
            wall = self.wall()
            last_watermark, last_pending = self._persisted.get(partition, (None, 0))
            moved = mark[0] != last_watermark and (
                wall - self._written_wall.get(partition, 0) >= self.lazy_ms
            )
            due = moved or mark[1] != last_pending
        else:
            due = mark != self._persisted.get(partition)
        if sent or due:
            self.table[f"{self.prefix}{partition}"] = clock
            self._persisted[partition] = mark
            if self.lazy_ms:
                self._written_wall[partition] = wall

    def forget(self, partitions: Iterable[int]) -> None:
        """Partitions revoked: their clocks are read again if they come back (another worker
        may have moved them meanwhile)."""
        for partition in partitions:
            self._persisted.pop(partition, None)
            self._written_wall.pop(partition, None)
