"""The followers: tail semantics for files, /dev/kmsg records, journalctl as a child process."""

from __future__ import annotations

import os
import queue
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from producers.kmsg_follow import FollowError, follow_file, follow_journal, follow_kmsg

XID = "NVRM: Xid (PCI:0000:01:00): 79, pid=1122, GPU has fallen off the bus."
Follower = Callable[[threading.Event], Iterator[str]]


class Running:
    def __init__(self) -> None:
        self.lines: queue.Queue[str] = queue.Queue()
        self.error: BaseException | None = None
        self.stop = threading.Event()
        self.finished = threading.Event()

    def next(self) -> str:
        return self.lines.get(timeout=10)


@contextmanager
def following(follow: Follower) -> Iterator[Running]:
    run = Running()

    def target() -> None:
        try:
            for line in follow(run.stop):
                run.lines.put(line)
        except BaseException as exc:  # handed to the test
            run.error = exc
        finally:
            run.finished.set()

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    try:
        yield run
    finally:
        run.stop.set()
        thread.join(10)
        assert not thread.is_alive()


def append(path: Path, text: str) -> None:
    with path.open("a") as f:
        f.write(text)


def test_file_tail_starts_at_the_end(tmp_path: Path) -> None:
    log = tmp_path / "kern.log"
    log.write_text("old line 1\nold line 2\n")
    ready = threading.Event()
    with following(lambda stop: follow_file(log, stop, poll_s=0.01, ready=ready)) as run:
        assert ready.wait(10)
        append(log, XID + "\n")
        assert run.next() == XID
    assert run.lines.empty()


def test_file_from_start_reads_what_is_there(tmp_path: Path) -> None:
    log = tmp_path / "kern.log"
    log.write_text("one\ntwo\n")
    with following(lambda stop: follow_file(log, stop, from_start=True, poll_s=0.01)) as run:
        assert [run.next(), run.next()] == ["one", "two"]


def test_a_partial_line_waits_for_its_end(tmp_path: Path) -> None:
    log = tmp_path / "kern.log"
    log.write_text("")
    ready = threading.Event()
    with following(lambda stop: follow_file(log, stop, poll_s=0.01, ready=ready)) as run:
        assert ready.wait(10)
        append(log, "NVRM: Xid (PCI:0000:01:00): 79, GPU has")
        append(log, " fallen off the bus.\n")
        assert run.next() == "NVRM: Xid (PCI:0000:01:00): 79, GPU has fallen off the bus."


def test_rotation_and_truncation_are_followed(tmp_path: Path) -> None:
    log = tmp_path / "kern.log"
    log.write_text("before\n")
    ready = threading.Event()
    with following(lambda stop: follow_file(log, stop, poll_s=0.01, ready=ready)) as run:
        assert ready.wait(10)
        append(log, "first\n")
        assert run.next() == "first"
        log.rename(tmp_path / "kern.log.1")
        log.write_text("after rotation\n")
        assert run.next() == "after rotation"
        log.write_text("short\n")  # truncated in place and rewritten (copytruncate)
        assert run.next() == "short"


def test_a_file_that_appears_later_is_read_whole(tmp_path: Path) -> None:
    log = tmp_path / "later.log"
    stop = threading.Event()
    lines = follow_file(log, stop, poll_s=0.01)  # created while the file is missing
    log.write_text("hello\n")
    with following(lambda _: lines) as run:
        assert run.next() == "hello"
        stop.set()


def test_kmsg_records_without_continuation_lines(tmp_path: Path) -> None:
    dev = tmp_path / "kmsg"
    dev.write_bytes(
        b"6,1,100,-;first record\n SUBSYSTEM=pci\n DEVICE=+pci:0000:01:00.0\n"
        b"4,2,966500231,-;" + XID.encode() + b"\n"
    )
    with following(lambda stop: follow_kmsg(stop, str(dev), from_start=True, poll_s=0.01)) as run:
        assert run.next() == "6,1,100,-;first record"
        assert run.next() == "4,2,966500231,-;" + XID


def test_kmsg_starts_at_the_end_by_default(tmp_path: Path) -> None:
    dev = tmp_path / "kmsg"
    dev.write_bytes(b"6,1,100,-;old\n")
    ready = threading.Event()
    with following(lambda stop: follow_kmsg(stop, str(dev), poll_s=0.01, ready=ready)) as run:
        assert ready.wait(10)
        with dev.open("ab") as f:
            f.write(b"6,2,200,-;new\n")
        assert run.next() == "6,2,200,-;new"


def test_kmsg_that_cannot_be_opened_is_a_clear_error(tmp_path: Path) -> None:
    with following(lambda stop: follow_kmsg(stop, str(tmp_path / "missing"))) as run:
        assert run.finished.wait(10)
    assert isinstance(run.error, FollowError)
    assert "cannot read" in str(run.error)


def test_journal_lines_then_its_exit_is_an_error() -> None:
    script = "print('Aug 30 11:43:09 host kernel: " + XID + "'); print('bye'); raise SystemExit(3)"
    argv = [sys.executable, "-c", script]
    with following(lambda stop: follow_journal(stop, argv, poll_s=0.01)) as run:
        assert run.next() == "Aug 30 11:43:09 host kernel: " + XID
        assert run.next() == "bye"
        assert run.finished.wait(10)
    assert isinstance(run.error, FollowError)
    assert "exited with status 3" in str(run.error)


def test_journal_child_is_stopped_with_the_follower(tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    script = (
        "import os, sys, time\n"
        f"open({str(pid_file)!r}, 'w').write(str(os.getpid()))\n"
        "print('ready', flush=True)\n"
        "time.sleep(120)\n"
    )
    with following(
        lambda stop: follow_journal(stop, [sys.executable, "-c", script], poll_s=0.01)
    ) as run:
        assert run.next() == "ready"
        pid = int(pid_file.read_text())
    assert run.error is None
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_journal_command_missing() -> None:
    with following(lambda stop: follow_journal(stop, ["/nonexistent/journalctl"])) as run:
        assert run.finished.wait(10)
    assert isinstance(run.error, FollowError)
