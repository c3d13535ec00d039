"""Flood de-duplication: same GPU and code within the window -> one event with a count."""

from __future__ import annotations

from producers.dedup import FloodDeduper
from schemas.xid import GpuXid


def xid(code: int, uuid: str = "GPU-a", ts_ms: int = 0, message: str = "m") -> GpuXid:
    return GpuXid(node="n", xid=code, ts_ms=ts_ms, gpu_uuid=uuid, message=message)


def test_the_first_occurrence_goes_out_at_once() -> None:
    d = FloodDeduper(60)
    assert d.offer(xid(79), now=0.0) == [xid(79)]


def test_a_flood_becomes_one_event_per_window_carrying_the_count() -> None:
    d = FloodDeduper(60)
    out = d.offer(xid(31, ts_ms=0), now=0.0)
    for i in range(1, 1001):
        out += d.offer(xid(31, ts_ms=i, message=f"m{i}"), now=i * 0.01)
    assert out == [xid(31, ts_ms=0)]
    assert d.due(now=59.9) == []
    (summary,) = d.due(now=60.0)
    assert summary.count == 1000
    assert (summary.ts_ms, summary.message) == (1000, "m1000")  # the last repeat's
    assert d.suppressed == 1000


def test_counts_add_up_to_the_occurrences() -> None:
    d = FloodDeduper(10)
    published: list[GpuXid] = []
    for i in range(500):  # one every 0.1 s for 50 s: a continuous flood
        now = i * 0.1
        published += d.due(now)
        published += d.offer(xid(13), now)
    published += d.drain()
    assert sum(r.count for r in published) == 500
    assert len(published) <= 7  # the first, then one per window


def test_different_gpus_and_codes_are_separate() -> None:
    d = FloodDeduper(60)
    out = []
    for rec in (xid(13, "GPU-a"), xid(13, "GPU-b"), xid(31, "GPU-a"), xid(13, "GPU-a")):
        out += d.offer(rec, now=1.0)
    assert [(r.gpu_uuid, r.xid) for r in out] == [("GPU-a", 13), ("GPU-b", 13), ("GPU-a", 31)]


def test_a_quiet_window_ends_the_flood() -> None:
    d = FloodDeduper(60)
    d.offer(xid(79), now=0.0)
    assert d.due(now=61.0) == []
    assert len(d) == 0
    assert d.offer(xid(79), now=62.0) == [xid(79)]  # a new incident goes out at once


def test_a_late_repeat_flushes_the_old_window_first() -> None:
    d = FloodDeduper(60)
    d.offer(xid(48), now=0.0)
    d.offer(xid(48, ts_ms=5), now=5.0)
    out = d.offer(xid(48, ts_ms=70), now=70.0)  # no tick ran in between
    assert [(r.ts_ms, r.count) for r in out] == [(5, 1), (70, 1)]


def test_gpu_identity_falls_back_to_pci_then_index() -> None:
    d = FloodDeduper(60)
    a = GpuXid(node="n", xid=13, ts_ms=0, pci_bus_id="0000:01:00.0")
    b = GpuXid(node="n", xid=13, ts_ms=0, pci_bus_id="0000:02:00.0")
    c = GpuXid(node="n", xid=13, ts_ms=0, gpu_index=3)
    assert len(d.offer(a, 0) + d.offer(b, 0) + d.offer(c, 0) + d.offer(a, 0)) == 3


def test_window_zero_turns_it_off() -> None:
    d = FloodDeduper(0)
    assert d.offer(xid(13), 0.0) == [xid(13)]
    assert d.offer(xid(13), 0.0) == [xid(13)]


def test_drain_returns_pending_repeats() -> None:
    d = FloodDeduper(60)
    d.offer(xid(13), 0.0)
    d.offer(xid(13), 1.0)
    d.offer(xid(13), 2.0)
    (rest,) = d.drain()
    assert rest.count == 2
    assert d.drain() == []
