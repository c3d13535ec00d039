"""The NVML watchdog and the agent's heartbeat: a call that hangs raises `nvml_hung` within
the timeout, the heartbeat keeps coming and says NVML is stuck, and the condition clears
when the call returns (docs/silent-nodes.md)."""

from __future__ import annotations

import queue
import threading
import time
from typing import Any

import pytest
from nvml_fake import Blocks, FakeGpu, FakeNvml

from producers.heartbeat import Heartbeat
from producers.nvml_watch import NvmlSource
from producers.nvml_watchdog import NvmlWatchdog, TimedNvml
from schemas.health import GpuHealth
from schemas.xid import GpuXid

U0 = "GPU-11111111-2222-3333-4444-555555555555"
TIMEOUT_S = 0.3


def health_records(out: queue.Queue[GpuXid | GpuHealth]) -> GpuHealth:
    """The next node-level health record (per-GPU changes of the sampler are skipped)."""
    while True:
        rec = out.get(timeout=10)
        if isinstance(rec, GpuHealth) and rec.gpu_index is None:
            return rec


def test_a_hung_nvml_call_raises_nvml_hung_within_the_timeout_and_clears_when_it_returns() -> None:
    blocked = Blocks(then=45)
    fake = FakeNvml([FakeGpu(U0, "0000:3b:00.0", temperature=blocked)])
    source = NvmlSource(
        fake, "node-a", interval_s=3600, wait_timeout_ms=5, hang_timeout_s=TIMEOUT_S
    )
    beat_clock = [0.0]
    beat = Heartbeat("node-a", 30.0, [source.stuck], clock=lambda: beat_clock[0])
    out: queue.Queue[GpuXid | GpuHealth] = queue.Queue()
    thread = threading.Thread(target=source.run, args=(out.put,), daemon=True)
    thread.start()
    try:
        assert blocked.entered.wait(10)
        entered = time.monotonic()
        assert beat.due() is not None  # the first heartbeat, before the timeout: not stuck
        hung = health_records(out)
        took = time.monotonic() - entered
        assert hung.condition == "nvml_hung" and hung.node == "node-a"
        assert hung.detail is not None and "temperature" in hung.detail
        # raised once the call ran past the timeout, within one watchdog check after it
        assert took + 0.05 >= TIMEOUT_S and took < TIMEOUT_S + 2.0
        # the heartbeat keeps coming and says NVML is stuck
        beat_clock[0] += 30.0
        stuck = beat.due()
        assert stuck is not None and stuck.condition == "nvml_hung"
        assert stuck.detail is not None and "has not returned" in stuck.detail
        blocked.release()
        cleared = health_records(out)
        assert (cleared.condition, cleared.severity) == ("ok", "info")
        assert cleared.detail is not None and cleared.detail.startswith("NVML answers again")
        assert source.stuck() is None
        beat_clock[0] += 30.0
        again = beat.due()
        assert again is not None and again.condition == "heartbeat"
    finally:
        blocked.release()
        source.close()
        thread.join(10)
    assert not thread.is_alive()


class Clocked:
    """An NVML stand-in whose calls run `during` (a look from inside the call)."""

    def __init__(self) -> None:
        self.during: Any = None
        self.value = 1

    def temperature(self, handle: Any) -> int:
        self.during()
        return 40

    def event_wait(self, event_set: Any, timeout_ms: int) -> None:
        self.during()


def test_a_call_is_stuck_only_past_its_allowance_and_the_event_wait_gets_its_own_timeout() -> None:
    now = [100.0]
    inner = Clocked()
    timed = TimedNvml(inner, 10.0, clock=lambda: now[0])  # type: ignore[arg-type]
    seen: list[str | None] = []

    def look(advance: float) -> None:
        now[0] += advance
        seen.append(timed.stuck_detail())

    inner.during = lambda: look(10.0)
    assert timed.temperature(0) == 40
    inner.during = lambda: look(10.5)
    timed.temperature(0)
    inner.during = lambda: look(12.0)
    timed.event_wait("set", 2500)  # 10 s + its own 2.5 s
    inner.during = lambda: look(13.0)
    timed.event_wait("set", timeout_ms=2500)
    assert seen == [
        None,
        "NVML call temperature has not returned for 10.5 s",
        None,
        "NVML call event_wait has not returned for 13.0 s",
    ]
    assert timed.stuck() is None  # nothing in flight after the calls
    assert timed.value == 1  # plain attributes pass through


def test_the_watchdog_reports_a_hang_once_and_its_end_once() -> None:
    now = [0.0]
    inner = Clocked()
    timed = TimedNvml(inner, 5.0, clock=lambda: now[0])  # type: ignore[arg-type]
    got: list[GpuHealth] = []
    dog = NvmlWatchdog(timed, "node-a", got.append, now_ms=lambda: 1_800_000_000_000)
    assert dog.check_every_s == 1.0

    def during() -> None:
        dog.check()  # in time: nothing
        now[0] += 6.0
        dog.check()
        dog.check()  # still hung: not again
        assert [r.condition for r in got] == ["nvml_hung"]

    inner.during = during
    timed.temperature(0)
    dog.check()
    dog.check()
    assert [(r.condition, r.severity, r.gpu_index) for r in got] == [
        ("nvml_hung", "critical", None),
        ("ok", "info", None),
    ]
    assert got[0].detail == "NVML call temperature has not returned for 6.0 s"
    assert got[1].detail == "NVML answers again: temperature returned after 6.0 s"
    assert NvmlWatchdog(TimedNvml(inner, 0.4), "n", got.append, lambda: 0).check_every_s == 0.1


def test_the_heartbeat_goes_out_at_once_then_every_interval() -> None:
    now = [0.0]
    reasons: list[str | None] = [None]
    beat = Heartbeat(
        "node-a", 30.0, [lambda: None, lambda: reasons[0]], clock=lambda: now[0], now_ms=lambda: 7
    )
    first = beat.due()
    assert first == GpuHealth("node-a", 7, "heartbeat", None, "info", None, {"interval_s": 30.0})
    now[0] = 29.9
    assert beat.due() is None
    now[0] = 30.0
    reasons[0] = "NVML call temperature has not returned for 31.0 s"
    stuck = beat.due()
    assert stuck is not None
    assert (stuck.condition, stuck.severity, stuck.detail) == (
        "nvml_hung",
        "critical",
        reasons[0],
    )
    assert beat.due() is None
    now[0] = 60.5  # a late tick: the next one stays on the schedule
    assert beat.due() is not None
    now[0] = 89.9
    assert beat.due() is None
    now[0] = 90.0
    assert beat.due() is not None
    now[0] = 500.0  # a long stall: one now, the next an interval later
    assert beat.due() is not None
    now[0] = 529.9
    assert beat.due() is None
    now[0] = 530.0
    assert beat.due() is not None


@pytest.mark.parametrize("interval", [0.0, -1.0])
def test_a_heartbeat_interval_must_be_positive(interval: float) -> None:
    with pytest.raises(ValueError, match="heartbeat interval must be > 0"):
        Heartbeat("node-a", interval)
