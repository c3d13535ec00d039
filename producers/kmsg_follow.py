"""Line followers for the kernel-log source: /dev/kmsg, `journalctl -k -f`, or a file.

Each is a generator over complete lines that returns soon after `stop` is set. By default
they start at the end (old messages are not re-published); `from_start` reads what is there.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import select
import subprocess
import threading
from collections import deque
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO

log = logging.getLogger(__name__)

POLL_S = 0.5
JOURNAL_ARGV = ("journalctl", "-k", "-f", "-o", "short", "-n", "0", "--no-pager")


class FollowError(RuntimeError):
    """The log cannot be followed (missing permission, journalctl exited)."""


def follow_file(
    path: str | Path,
    stop: threading.Event,
    *,
    from_start: bool = False,
    poll_s: float = POLL_S,
    ready: threading.Event | None = None,
) -> Iterator[str]:
    """`tail -F`: follows appends, reopens on rotation or truncation, waits for the file to
    appear (a file missing now is read whole when it appears). `ready` is set once the file is
    open and positioned."""
    path = Path(path)
    return _follow_file(path, stop, from_start or not path.exists(), poll_s, ready)


def _follow_file(
    path: Path,
    stop: threading.Event,
    from_start: bool,
    poll_s: float,
    ready: threading.Event | None,
) -> Iterator[str]:
    f: IO[bytes] | None = None
    partial = b""
    try:
        while not stop.is_set():
            if f is None:
                f = _open_positioned(path, from_start)
                if f is None:
                    stop.wait(poll_s)
                    continue
                from_start = True  # a file that appears or is rotated later is read whole
                if ready is not None:
                    ready.set()
            chunk = f.readline()
            if chunk:
                if chunk.endswith(b"\n"):
                    yield (partial + chunk).decode("utf-8", errors="replace").rstrip("\r\n")
                    partial = b""
                else:
                    partial += chunk
                continue
            if _rotated(path, f):
                f.close()
                f, partial = None, b""
                continue
            stop.wait(poll_s)
    finally:
        if f is not None:
            f.close()


def _open_positioned(path: Path, from_start: bool) -> IO[bytes] | None:
    try:
        f = path.open("rb")
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise FollowError(f"cannot read {path}: {exc}") from exc
    if not from_start:
        f.seek(0, os.SEEK_END)
    return f


def _rotated(path: Path, f: IO[bytes]) -> bool:
    try:
        st = path.stat()
    except FileNotFoundError:
        return False  # gone for now: keep the old file until a new one appears
    return st.st_ino != os.fstat(f.fileno()).st_ino or st.st_size < f.tell()


def follow_kmsg(
    stop: threading.Event,
    path: str = "/dev/kmsg",
    *,
    from_start: bool = False,
    poll_s: float = POLL_S,
    ready: threading.Event | None = None,
) -> Iterator[str]:
    """/dev/kmsg records (`pri,seq,usec,flags;text`), first line of each; continuation lines
    (starting with a space) are dropped. `ready` is set once the device is open and positioned."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as exc:
        raise FollowError(
            f"cannot read {path}: {exc} (the agent needs root or CAP_SYSLOG)"
        ) from exc
    try:
        if not from_start:
            os.lseek(fd, 0, os.SEEK_END)
        if ready is not None:
            ready.set()
        pending = b""
        while not stop.is_set():
            readable, _, _ = select.select([fd], [], [], poll_s)
            if not readable:
                continue
            try:
                chunk = os.read(fd, 16384)
            except BlockingIOError:
                continue
            except OSError as exc:
                if exc.errno == errno.EPIPE:  # the ring buffer overwrote records we had not read
                    log.warning("%s: kernel records were lost before we read them", path)
                    continue
                raise
            if not chunk:  # a regular file at its end (tests); the device never returns b""
                stop.wait(poll_s)
                continue
            pending += chunk
            *lines, pending = pending.split(b"\n")
            for raw in lines:
                if raw and not raw.startswith(b" "):
                    yield raw.decode("utf-8", errors="replace")
    finally:
        os.close(fd)


def follow_journal(
    stop: threading.Event,
    argv: Sequence[str] = JOURNAL_ARGV,
    *,
    poll_s: float = POLL_S,
) -> Iterator[str]:
    """Lines printed by `journalctl -k -f` (or `argv`); FollowError when it exits."""
    try:
        proc = subprocess.Popen(
            list(argv), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
        )
    except OSError as exc:
        raise FollowError(f"cannot run {argv[0]}: {exc}") from exc
    assert proc.stdout is not None
    out = proc.stdout
    last: deque[str] = deque(maxlen=5)
    try:
        while not stop.is_set():
            readable, _, _ = select.select([out], [], [], poll_s)
            if not readable:
                continue
            raw = out.readline()
            if not raw:
                rc = proc.wait()
                tail = " | ".join(last)
                raise FollowError(f"{argv[0]} exited with status {rc}: {tail or 'no output'}")
            line = raw.decode("utf-8", errors="replace").rstrip("\r\n")
            last.append(line)
            yield line
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        with contextlib.suppress(OSError):
            out.close()
