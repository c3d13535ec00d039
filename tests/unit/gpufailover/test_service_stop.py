"""`Service.stop` on a child that will not stop: the failure carries the child's own account of
its tasks (mode's Worker writes every task's stack on SIGUSR1), so a hang in CI says where."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from gpufailover.bench.service import Service

# Ignores SIGTERM like a hung worker; answers SIGUSR1 as mode's Worker does (a stack dump).
STUBBORN = """
import signal, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
def cry(*_):
    sys.stdout.write("ALL TASKS\\nTask stuck in await_forever\\n")
    sys.stdout.flush()
signal.signal(signal.SIGUSR1, cry)
sys.stdout.write("ready\\n")
sys.stdout.flush()
while True:
    time.sleep(0.05)
"""


def test_a_child_ignoring_sigterm_is_killed_and_its_task_dump_reported(tmp_path: Path) -> None:
    log_path = tmp_path / "stubborn.log"
    service = Service(["stubborn"], log_path, {})
    with log_path.open("ab") as log:
        service.proc = subprocess.Popen(
            [sys.executable, "-c", STUBBORN], stdout=log, stderr=subprocess.STDOUT
        )
    while "ready" not in log_path.read_text():
        assert service.proc.poll() is None
    with pytest.raises(AssertionError) as failure:
        service.stop(timeout_s=0.5)
    message = str(failure.value)
    assert "stubborn ignored SIGTERM" in message
    assert "--- its tasks:\nALL TASKS\nTask stuck in await_forever" in message
    assert service.proc.poll() is not None  # killed, not left behind


def test_a_child_that_stops_returns_its_exit_code(tmp_path: Path) -> None:
    service = Service(["quick"], tmp_path / "quick.log", {})
    service.proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    assert service.stop(timeout_s=10) == -15  # SIGTERM's default action
