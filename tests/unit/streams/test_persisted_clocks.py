"""When a partition's engine clock is written to its table (streams.clock.PersistedClocks)."""

from __future__ import annotations

from dataclasses import dataclass, field

from streams.clock import PersistedClocks


@dataclass
class Clock:
    watermark: int | None = None
    pending: list[int] = field(default_factory=list)


class Writes(dict[str, Clock]):
    """A table that counts writes."""

    def __init__(self) -> None:
        super().__init__()
        self.writes: list[str] = []

    def __setitem__(self, key: str, value: Clock) -> None:
        self.writes.append(key)
        super().__setitem__(key, value)


def clocks(
    table: Writes, lazy_ms: int = 0, wall: list[int] | None = None
) -> PersistedClocks[Clock]:
    now = wall if wall is not None else [0]
    return PersistedClocks(
        table, "p", Clock, lambda c: (c.watermark, len(c.pending)), lazy_ms, lambda: now[0]
    )


def test_an_eager_clock_is_written_whenever_it_moves_or_outputs_were_sent() -> None:
    table = Writes()
    persisted = clocks(table)
    clock = persisted.load(3)
    persisted.save(3, clock, sent=False)
    assert table.writes == []  # unchanged
    clock.watermark = 10
    persisted.save(3, clock, sent=False)
    clock.pending.append(20)
    persisted.save(3, clock, sent=False)
    persisted.save(3, clock, sent=True)
    assert table.writes == ["p3", "p3", "p3"]
    assert table["p3"] is clock


def test_a_lazy_clock_writes_a_moved_watermark_at_most_every_lazy_ms() -> None:
    table, wall = Writes(), [5_000]
    persisted = clocks(table, lazy_ms=1_000, wall=wall)
    clock = persisted.load(0)
    clock.watermark = 1
    persisted.save(0, clock, sent=False)  # first move: written
    clock.watermark = 2
    wall[0] += 999
    persisted.save(0, clock, sent=False)  # moved too soon: not written
    assert table.writes == ["p0"]
    clock.pending.append(9)
    persisted.save(0, clock, sent=False)  # a new wake-up is written at once
    clock.watermark = 3
    wall[0] += 1_000
    persisted.save(0, clock, sent=False)
    assert table.writes == ["p0", "p0", "p0"]


def test_a_clock_is_read_from_the_table_and_again_after_it_is_forgotten() -> None:
    table = Writes()
    table["p1"] = Clock(watermark=7)
    persisted = clocks(table)
    assert persisted.load(1).watermark == 7
    assert persisted.load(2).watermark is None  # none yet: a new clock
    table["p1"] = Clock(watermark=9)  # another owner moved it meanwhile
    persisted.forget([1])
    clock = persisted.load(1)
    assert clock.watermark == 9
    persisted.save(1, clock, sent=False)
    assert table.writes == ["p1", "p1"]  # only the test's own writes: unchanged since read
