"""Where the /dev/kmsg source starts after a restart, and how far its input is safe to skip.

Every /dev/kmsg record carries the kernel's sequence number (`pri,seq,usec,flags;text`). The
agent persists a cursor (boot id, seq) in the spool, in the same transaction as the records
the lines up to `seq` produced, so after a restart (SIGKILL included):
- same boot: the ring buffer is read from its start, records up to the cursor only teach the
  PCI -> GPU directory, publishing resumes with the next one (no gap, no repeat);
- another boot (/proc/sys/kernel/random/boot_id changed): sequence numbers restarted, so
  everything in the ring buffer is new: read and published from its start;
- no cursor yet (first run): `--from-start` publishes the ring buffer; else the agent notes
  the last record there now (`last_seq`) and starts after it, storing that as its cursor at
  once, so even a first run that reads nothing leaves no gap behind it.

The cursor trails XIDs the flood de-duplication holds back: a repeat folded into a summary not
yet spooled keeps the cursor before its line, so a crash re-reads it instead of losing it.
"""

from __future__ import annotations

import errno
import logging
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from producers.dedup import GpuKey
from producers.spool import Cursor, Spool
from schemas.health import GpuHealth
from schemas.xid import GpuXid

log = logging.getLogger(__name__)

BOOT_ID_PATH = Path("/proc/sys/kernel/random/boot_id")
_SEQ_RE = re.compile(r"^\d+,(?P<seq>\d+),")


@dataclass(frozen=True, slots=True)
class KernelRead:
    """The kernel-log source read kernel record `seq`; `record` is what it gave, if anything."""

    seq: int
    record: GpuXid | GpuHealth | None


@dataclass(frozen=True, slots=True)
class ResumePoint:
    from_start: bool  # read the ring buffer from its start
    after_seq: int | None  # records up to this seq were published before: do not again


def kmsg_seq(line: str) -> int | None:
    m = _SEQ_RE.match(line)
    return int(m["seq"]) if m else None


def read_boot_id(path: Path = BOOT_ID_PATH) -> str:
    """This boot's id; "" where the kernel does not say (then every start counts as a reboot:
    the ring buffer is read whole, repeats possible, never a gap)."""
    try:
        return path.read_text().strip()
    except OSError as exc:
        log.warning("cannot read the boot id from %s (%s): restarts read the whole ring", path, exc)
        return ""


def last_seq(path: str) -> int | None:
    """The sequence number of the newest record in /dev/kmsg (or a file of its records) now;
    None when there is none (an OSError when it cannot be read: the follower says so too)."""
    last: int | None = None
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        pending = b""
        while True:
            try:
                chunk = os.read(fd, 16384)
            except BlockingIOError:  # the device: no more records for now
                break
            except OSError as exc:
                if exc.errno == errno.EPIPE:  # overwritten while we read: go on
                    continue
                raise
            if not chunk:  # a regular file at its end
                break
            pending += chunk
            *lines, pending = pending.split(b"\n")
            for raw in lines:
                seq = kmsg_seq(raw.decode("utf-8", errors="replace"))
                if seq is not None:
                    last = seq
    finally:
        os.close(fd)
    return last


def resume_point(
    saved: Cursor | None, boot_id: str, from_start: bool, now_last: Callable[[], int | None]
) -> ResumePoint:
    """Where to start; `now_last` gives the newest record's seq (asked on a first run only)."""
    if saved is None:
        if from_start:
            return ResumePoint(from_start=True, after_seq=None)
        newest = now_last()
        log.info("no kernel-log cursor yet: publishing what comes after record %s", newest)
        return ResumePoint(from_start=True, after_seq=newest)
    if not boot_id or saved.boot_id != boot_id:
        log.info(
            "%s: the node rebooted since the last kernel record published (boot %s, now %s): "
            "publishing the ring buffer from its start",
            saved.name,
            saved.boot_id or "unknown",
            boot_id or "unknown",
        )
        return ResumePoint(from_start=True, after_seq=None)
    log.info("%s: resuming after kernel record %d", saved.name, saved.seq)
    return ResumePoint(from_start=True, after_seq=saved.seq)


def kmsg_start(spool: Spool, device: str, from_start: bool) -> tuple[ResumePoint, CursorTracker]:
    """Where the /dev/kmsg source at `device` starts, from the cursor stored in `spool`."""
    name, boot_id = f"kmsg:{device}", read_boot_id()
    saved = spool.cursor(name)

    def newest() -> int | None:
        try:
            return last_seq(device)
        except OSError:
            return None  # unreadable: the follower fails on it with the reason

    point = resume_point(saved, boot_id, from_start, newest)
    stored = point.after_seq is not None and saved == Cursor(name, boot_id, point.after_seq)
    return point, CursorTracker(name, boot_id, point.after_seq, stored=stored)


class CursorTracker:
    """The highest kernel seq whose every effect is in the spool (on the event loop)."""

    def __init__(self, name: str, boot_id: str, start: int | None, *, stored: bool) -> None:
        """`start`: the last seq published before; `stored`: whether the spool has it already."""
        self.name = name
        self.boot_id = boot_id
        self.seen = start  # the last seq read
        self._saved = start if stored else None
        self._held: dict[GpuKey, int | None] = {}  # key -> the seq before its first fold

    def folded(self, key: GpuKey) -> None:
        """The XID of the line being read was folded into `key`'s pending summary."""
        self._held.setdefault(key, self.seen)

    def released(self, keys: list[GpuKey]) -> None:
        """The summaries of `keys` are being spooled: their folded lines are covered."""
        for key in keys:
            self._held.pop(key, None)

    def release_all(self) -> None:
        self._held.clear()

    def advance(self, seq: int) -> None:
        self.seen = seq

    def position(self) -> int | None:
        if not self._held:
            return self.seen
        held = [s for s in self._held.values() if s is not None]
        return min(held) if len(held) == len(self._held) else None

    def pending(self) -> Cursor | None:
        """The cursor to store, when it moved since the last `saved`."""
        pos = self.position()
        if pos is None or pos == self._saved:
            return None
        return Cursor(self.name, self.boot_id, pos)

    def saved(self, cursor: Cursor) -> None:
        self._saved = cursor.seq
