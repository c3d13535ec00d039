"""Kernel-log resume: where a restarted /dev/kmsg source starts, what it skips, and the cursor
the agent stores with its records (held behind XIDs the de-duplication still folds)."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable
from pathlib import Path

import orjson
import pytest

from producers.agent import Agent, Sink
from producers.dedup import gpu_key
from producers.kmsg import GpuDirectory, KernelLogSource
from producers.kmsg_resume import (
    CursorTracker,
    KernelRead,
    ResumePoint,
    kmsg_seq,
    kmsg_start,
    last_seq,
    read_boot_id,
    resume_point,
)
from producers.metrics import AgentMetrics
from producers.publisher import BufferedPublisher
from producers.spool import Cursor, Spool
from schemas.health import GpuHealth
from schemas.topics import TopicNames
from schemas.xid import GpuXid

UUID = "GPU-5e4c1fb2-2fa8-1e57-4a3b-8e4b1b2d2a11"
XID79 = "NVRM: Xid (PCI:0000:01:00): 79, pid=1122, GPU has fallen off the bus."


def test_sequence_numbers_and_boot_id(tmp_path: Path) -> None:
    assert kmsg_seq("4,1234,966500231,-;" + XID79) == 1234
    assert kmsg_seq("[  966.50] " + XID79) is None
    boot = tmp_path / "boot_id"
    boot.write_text("0f6a3c1e-2b\n")
    assert read_boot_id(boot) == "0f6a3c1e-2b"
    assert read_boot_id(tmp_path / "missing") == ""


def test_resume_point_same_boot_other_boot_first_run() -> None:
    saved = Cursor("kmsg:/dev/kmsg", "boot-a", 41)

    def newest() -> int:
        return 57

    assert resume_point(saved, "boot-a", False, newest) == ResumePoint(True, 41)
    assert resume_point(saved, "boot-b", False, newest) == ResumePoint(True, None)
    assert resume_point(saved, "", False, newest) == ResumePoint(True, None)  # unknown boot
    # First run: after what the ring holds now (not from its unknown end), or all of it.
    assert resume_point(None, "boot-a", False, newest) == ResumePoint(True, 57)
    assert resume_point(None, "boot-a", True, newest) == ResumePoint(True, None)


def test_last_seq_of_a_kmsg_file(tmp_path: Path) -> None:
    dev = tmp_path / "kmsg"
    dev.write_text("")
    assert last_seq(str(dev)) is None
    dev.write_text(kmsg(3, "a") + "\n SUBSYSTEM=pci\n" + kmsg(4, "b") + "\n4,5,0,-;partial")
    assert last_seq(str(dev)) == 4  # a record without its newline is not there yet
    with pytest.raises(OSError):
        last_seq(str(tmp_path / "missing"))


def test_kmsg_start_from_the_stored_cursor_or_the_rings_newest(tmp_path: Path) -> None:
    dev = tmp_path / "kmsg"
    dev.write_text(kmsg(0, "boot") + "\n" + kmsg(1, "later") + "\n")
    spool = Spool(None, AgentMetrics())
    point, tracker = kmsg_start(spool, str(dev), from_start=False)
    assert point == ResumePoint(True, 1)
    assert tracker.pending() == Cursor(f"kmsg:{dev}", read_boot_id(), 1)  # to store at once
    spool.append([], Cursor(f"kmsg:{dev}", read_boot_id(), 0))
    point, tracker = kmsg_start(spool, str(dev), from_start=False)
    assert point == ResumePoint(True, 0)
    assert tracker.pending() is None  # stored already
    spool.append([], Cursor(f"kmsg:{dev}", "another boot", 0))
    point, tracker = kmsg_start(spool, str(dev), from_start=False)
    assert point == ResumePoint(True, None)
    assert point == kmsg_start(spool, str(tmp_path / "missing"), from_start=False)[0]


def kmsg(seq: int, text: str) -> str:
    return f"4,{seq},{seq * 1000},-;{text}"


def sequenced(resume_after: int | None) -> tuple[KernelLogSource, GpuDirectory]:
    directory = GpuDirectory()
    source = KernelLogSource(
        "kmsg",
        lambda stop: iter(()),
        "node-a",
        directory,
        AgentMetrics(),
        kernel_time=True,
        sequenced=True,
        resume_after=resume_after,
    )
    return source, directory


def test_records_up_to_the_cursor_only_teach_the_directory(
    caplog: pytest.LogCaptureFixture,
) -> None:
    source, directory = sequenced(resume_after=3)
    out: list[GpuXid | GpuHealth | KernelRead] = []
    with caplog.at_level(logging.WARNING, logger="producers.kmsg"):
        source.handle_line(kmsg(2, f"NVRM: GPU at PCI:0000:01:00: {UUID}"), out.append)
        source.handle_line(kmsg(3, XID79), out.append)  # published by the last run
        source.handle_line(kmsg(4, "usb 1-1: new device"), out.append)
        source.handle_line(kmsg(5, XID79), out.append)
    assert directory.lookup("0000:01:00.0") == (None, UUID)
    assert [r.seq for r in out if isinstance(r, KernelRead)] == [4, 5]
    first, second = out
    assert isinstance(first, KernelRead) and first.record is None
    assert isinstance(second, KernelRead) and isinstance(second.record, GpuXid)
    assert (second.record.xid, second.record.gpu_uuid) == (79, UUID)
    assert not caplog.records  # 4 follows 3: no gap


def test_a_gap_after_the_cursor_is_reported(caplog: pytest.LogCaptureFixture) -> None:
    source, _ = sequenced(resume_after=3)
    out: list[GpuXid | GpuHealth | KernelRead] = []
    with caplog.at_level(logging.WARNING, logger="producers.kmsg"):
        source.handle_line(kmsg(9, XID79), out.append)
        source.handle_line(kmsg(10, XID79), out.append)
    (warning,) = caplog.records
    assert "kernel records 4..8 were overwritten" in warning.getMessage()
    assert [r.seq for r in out if isinstance(r, KernelRead)] == [9, 10]


def xid(code: int, gpu: str = "GPU-a") -> GpuXid:
    return GpuXid(node="node-a", xid=code, ts_ms=1, gpu_index=0, gpu_uuid=gpu, source="kmsg")


def test_the_tracker_holds_the_cursor_before_a_fold_until_its_summary() -> None:
    t = CursorTracker("kmsg", "boot-a", start=10, stored=True)
    assert t.pending() is None  # nothing moved since the resume point
    t.advance(11)  # XID 13, first occurrence: out at once
    t.folded(gpu_key(xid(13)))  # line 12 repeats it: folded
    t.advance(12)
    t.folded(gpu_key(xid(13)))  # line 13 too: still held at 11
    t.advance(13)
    t.folded(gpu_key(xid(31, "GPU-b")))  # line 14, another key, held at 13
    t.advance(14)
    assert t.position() == 11
    cur = t.pending()
    assert cur == Cursor("kmsg", "boot-a", 11)
    t.saved(cur)
    assert t.pending() is None
    t.released([gpu_key(xid(13))])
    assert t.position() == 13
    t.release_all()
    assert t.pending() == Cursor("kmsg", "boot-a", 14)
    fresh = CursorTracker("kmsg", "boot-a", start=10, stored=False)  # a first run's start point
    assert fresh.pending() == Cursor("kmsg", "boot-a", 10)  # stored at the first chance


class Reads:
    """A /dev/kmsg-like source: hands fixed `KernelRead`s over, then waits for close."""

    def __init__(self, reads: list[KernelRead], then: Callable[[], object]) -> None:
        self.name = "kmsg"
        self.reads = reads
        self.then = then
        self.closed = threading.Event()

    def run(self, sink: Sink) -> None:
        for read in self.reads:
            sink(read)
        self.then()
        self.closed.wait(10)

    def close(self) -> None:
        self.closed.set()


class NoBroker:
    async def start(self) -> None:
        from aiokafka.errors import KafkaConnectionError

        raise KafkaConnectionError("down")

    async def stop(self) -> None:
        return None

    async def send(
        self, topic: str, value: bytes, key: bytes | None = None
    ) -> asyncio.Future[None]:
        raise AssertionError("never connected")


def agent_on(spool: Spool, start: int | None, window_s: float) -> tuple[Agent, list[float]]:
    metrics = spool.metrics
    publisher = BufferedPublisher(NoBroker, spool, metrics, backoff_s=(0.001, 0.01))
    tracker = CursorTracker("kmsg:/dev/kmsg", "boot-a", start, stored=start is not None)
    clock = [0.0]  # the de-duplication's monotonic clock
    agent = Agent(
        TopicNames(""),
        publisher,
        metrics,
        dedup_window_s=window_s,
        cursor=tracker,
        clock=lambda: clock[0],
    )
    return agent, clock


async def test_agent_stores_the_cursor_with_records_and_behind_folded_repeats(
    tmp_path: Path,
) -> None:
    spool = Spool(tmp_path / "spool.sqlite", AgentMetrics())
    agent, clock = agent_on(spool, start=None, window_s=3600)
    agent.emit(KernelRead(1, None))
    assert spool.cursor("kmsg:/dev/kmsg") is None  # a line without records waits for a tick
    agent.emit(KernelRead(2, xid(79)))
    assert spool.cursor("kmsg:/dev/kmsg") == Cursor("kmsg:/dev/kmsg", "boot-a", 2)
    agent.emit(KernelRead(3, xid(79)))  # folded: nothing spooled, the cursor stays at 2
    agent.emit(KernelRead(4, xid(48, "GPU-b")))  # spooled, but line 3 is still held
    assert len(spool) == 2
    assert spool.cursor("kmsg:/dev/kmsg") == Cursor("kmsg:/dev/kmsg", "boot-a", 2)
    # A crash now re-reads from 3: the folded repeat is published, not lost (48 may repeat).
    clock[0] = 3600.0  # the windows close
    agent.flush_due()  # the summary of 79 goes out: line 3 is covered
    assert len(spool) == 3
    assert spool.cursor("kmsg:/dev/kmsg") == Cursor("kmsg:/dev/kmsg", "boot-a", 4)
    assert [orjson.loads(s.item.value)["xid"] for s in spool.head(3)] == [79, 48, 79]


async def test_agent_run_stores_the_last_line_at_shutdown(tmp_path: Path) -> None:
    path = tmp_path / "spool.sqlite"
    spool = Spool(path, AgentMetrics())
    agent, _ = agent_on(spool, start=5, window_s=60)
    reads = [KernelRead(6, xid(79)), KernelRead(7, xid(79)), KernelRead(8, None)]
    loop = asyncio.get_running_loop()
    source = Reads(reads, then=lambda: loop.call_soon_threadsafe(agent.stop))  # after the reads
    assert await asyncio.wait_for(agent.run([source]), 10) == 0
    spool.close()
    again = Spool(path, AgentMetrics())
    assert again.cursor("kmsg:/dev/kmsg") == Cursor("kmsg:/dev/kmsg", "boot-a", 8)
    kept = [orjson.loads(s.item.value)["xid"] for s in again.head(10)]
    assert kept == [79, 79]  # the first XID 79, then its summary (drained at shutdown)
