"""A short chaos run on the real broker must find no violation (issue 11: CI runs one).

`gpufailover chaos` runs as the shipped command would: 2 classifier workers plus the
quarantine, requeue and job-status services as processes, 6 rounds of the simulator's mix, and
seed 16, whose schedule SIGKILLs every kind of service and adds and removes a worker. It uses
the session's broker, so a broker restart is not part of it (the harness skips that fault
when it does not own the broker).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

SEED = 16
KILLS = {"kill-classifier", "kill-quarantine", "kill-requeue", "kill-job-status"}


@pytest.mark.timeout(900)
def test_a_short_chaos_run_finds_no_violation(kafka_bootstrap: str, tmp_path: Path) -> None:
    out = tmp_path / "chaos.json"
    faults = ",".join(sorted(KILLS | {"add-worker", "remove-worker"}))
    cmd = [
        sys.executable, "-m", "gpufailover", "--log-level", "WARNING", "chaos",
        "--bootstrap", kafka_bootstrap, "--rounds", "6", "--workers", "2",
        "--seed", str(SEED), "--jobs-per-round", "4", "--faults", faults,
        "--json", str(out), "--work-dir", str(tmp_path / "logs"), "--quiesce-timeout", "180",
    ]  # fmt: skip
    env = {**os.environ, "GPUFAILOVER_STATE_DIR": str(tmp_path / "state")}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=840, env=env, check=False)
    report = f"stdout:\n{proc.stdout}\nstderr (tail):\n{proc.stderr[-4000:]}"
    assert out.exists(), report
    data = orjson.loads(out.read_bytes())
    done = {f["kind"] for f in data["faults"] if f["outcome"] == "done"}
    assert done >= KILLS | {"add-worker", "remove-worker"}, report  # the run did what it says
    assert data["expected_decisions"] == 24, report
    assert data["violations"] == 0, report
    assert proc.returncode == 0, report
