"""`gpufailover agent` with no broker (the "try it anywhere" example): it says it is spooling,
stops within a second on SIGTERM, keeps what it read for the next start, and one spool has
one owner."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from producers.metrics import AgentMetrics
from producers.spool import Spool

XID = "[  966.50] NVRM: Xid (PCI:0000:3b:00): 79, pid=1122, GPU has fallen off the bus.\n"


@contextmanager
def agent(tmp_path: Path, log: Path) -> Iterator[subprocess.Popen[bytes]]:
    kern = tmp_path / "kern.log"
    if not kern.exists():
        kern.write_text(XID)
    env = {**os.environ, "GPUFAILOVER_STATE_DIR": str(tmp_path / "state")}
    env.pop("GPUFAILOVER_AGENT_SPOOL_DIR", None)
    argv = [sys.executable, "-m", "gpufailover", "agent", "--source", f"file:{kern}",
            "--from-start", "--node", "gpu-017", "--bootstrap", "127.0.0.1:1"]  # fmt: skip
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def wait_for_text(log: Path, text: str, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 60
    while text not in log.read_text(errors="replace"):
        assert proc.poll() is None, log.read_text(errors="replace")
        assert time.monotonic() < deadline, f"no {text!r} in 60 s:\n{log.read_text()}"
        time.sleep(0.05)  # polling a log file with a deadline


def test_without_a_broker_it_says_it_is_spooling_and_stops_at_once(tmp_path: Path) -> None:
    log = tmp_path / "agent.log"
    with agent(tmp_path, log) as proc:
        wait_for_text(log, "gpu.xid spooled, 1 events waiting in", proc)
        sent = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(30)
        took = time.monotonic() - sent
    text = log.read_text()
    assert rc == 0, text
    assert took < 1.0, f"stopped {took:.2f} s after SIGTERM:\n{text}"
    assert "broker unreachable" in text
    assert "1 events not delivered: kept in" in text
    spool = Spool(tmp_path / "state" / "agent-spool" / "gpu-017.file.sqlite", AgentMetrics())
    (kept,) = spool.head(10)
    assert (kept.item.topic, kept.item.key) == ("gpu.xid", b"gpu-017")
    spool.close()


def test_a_second_agent_on_the_same_spool_is_refused(tmp_path: Path) -> None:
    with agent(tmp_path, tmp_path / "first.log") as first:
        wait_for_text(tmp_path / "first.log", "events waiting in", first)
        with agent(tmp_path, tmp_path / "second.log") as second:
            assert second.wait(60) == 1
        first.send_signal(signal.SIGTERM)
        assert first.wait(30) == 0
    assert "in use by another agent" in (tmp_path / "second.log").read_text()


def test_a_first_run_that_read_nothing_still_leaves_no_gap(tmp_path: Path) -> None:
    """/dev/kmsg without --from-start: the first run starts after the newest record and stores
    that, so a record logged while the agent is down is published by the next run."""
    dev = tmp_path / "kmsg"
    dev.write_text("6,1,100,-;boot\n4,2,200,-;NVRM: Xid (PCI:0000:3b:00): 79, old news\n")
    env = {**os.environ, "GPUFAILOVER_AGENT_SPOOL_DIR": str(tmp_path / "spool")}
    argv = [sys.executable, "-m", "gpufailover", "agent", "--source", "kmsg", "--kmsg-path",
            str(dev), "--node", "gpu-017", "--bootstrap", "127.0.0.1:1"]  # fmt: skip
    for run in ("first", "second"):
        log = tmp_path / f"{run}.log"
        with log.open("wb") as out:
            proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env)
        try:
            if run == "first":
                wait_for_text(log, "publishing what comes after record 2", proc)
            else:
                wait_for_text(log, "resuming after kernel record 2", proc)
                wait_for_text(log, "1 events waiting in", proc)
            wait_for_text(log, "agent on node", proc)  # SIGTERM is handled from here on
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(30) == 0, log.read_text()
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        with dev.open("a") as f:  # logged while the agent is down
            f.write("4,3,300,-;NVRM: Xid (PCI:0000:3b:00): 48, pid=1, DBE\n")
    spool = Spool(tmp_path / "spool" / "gpu-017.kmsg.sqlite", AgentMetrics())
    (kept,) = spool.head(10)
    assert b'"xid":48' in kept.item.value  # record 3 only: not 2 (before the first run)
    cursor = spool.cursor(f"kmsg:{dev}")
    assert cursor is not None and cursor.seq == 3
    spool.close()
