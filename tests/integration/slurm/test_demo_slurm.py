"""`gpufailover demo --scheduler slurm` on a real broker and its own real Slurm cluster: the
report's key lines hold (every job failure decided, the nodes drained in Slurm are the
quarantined ones, failed-over jobs requeued in Slurm away from their suspects), and nothing of
the run is left running."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from tests.integration.slurm_cluster import missing_binaries
from tests.integration.test_demo import _processes_mentioning


def _demo(args: list[str], env: dict[str, str], timeout_s: float) -> tuple[int, str]:
    done = subprocess.run(
        [sys.executable, "-m", "gpufailover", "demo", "--scheduler", "slurm", *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=timeout_s,
        check=False,
    )
    return done.returncode, done.stdout


def test_slurm_demo_drains_the_quarantined_nodes_and_requeues_the_failed_over_jobs(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    missing = missing_binaries()
    if missing:
        pytest.skip(f"Slurm not installed (missing {', '.join(missing)}); .ci/run installs it")
    if os.geteuid() != 0:
        pytest.skip("the local Slurm cluster runs its daemons and jobs as root")
    report = tmp_path / "report.json"
    env = {**os.environ, "GPUFAILOVER_STATE_DIR": str(tmp_path / "state")}
    args = ["--minutes", "1", "--seed", "1", "--bootstrap", kafka_bootstrap, "--json",
            str(report), "--plain", "--check", "--log-dir", str(tmp_path / "logs")]  # fmt: skip
    rc, out = _demo(args, env, timeout_s=300)
    assert rc == 0, out[-6000:]
    s = orjson.loads(report.read_bytes())

    d, q, sl = s["decisions"], s["quarantines"], s["slurm"]
    assert d["job_incidents"] >= 3, d
    assert d["total"] == d["job_incidents"] and d["missing"] == [] and d["duplicated"] == [], d
    assert d["stray"] == 0
    assert s["accuracy"]["accuracy"] >= 0.95, s["accuracy"]["wrong"]
    assert q["total"] >= 1 and q["false"] == 0, q
    assert sl["drained_nodes"] == q["nodes"], (sl, q)  # drained with our reason, as Slurm showed
    assert sl["failovers"] >= 1 and sl["requeued"] == sl["failovers"], sl
    assert (
        sl["requeued_excluding_suspects"] == sl["failovers"] and sl["ran_again_on_a_suspect"] == 0
    )
    assert s["run"]["stopped"] is None

    decisions = re.search(r"^decisions +(\d+) for (\d+) job failures \(missing 0", out, re.M)
    assert decisions and decisions.group(1) == decisions.group(2), out[-4000:]
    assert "(= the quarantined nodes)" in out and "[FAIL]" not in out
    assert re.search(rf"^slurm requeued {sl['failovers']}/{sl['failovers']} failovers", out, re.M)
    base = re.search(r"^slurm up under (\S+)", out, re.M)
    assert base is not None
    assert _processes_mentioning(s["run"]["prefix"]) == []
    assert _processes_mentioning(base.group(1)) == []  # munged, slurmctld, slurmd, jobs
    assert not Path(base.group(1)).exists()


def test_without_slurm_the_demo_says_so_and_exits_2(tmp_path: Path) -> None:
    env = {**os.environ, "PATH": str(tmp_path)}  # no sbatch, slurmctld, munged ... on it
    rc, out = _demo(["--minutes", "1"], env, timeout_s=60)
    assert rc == 2, out
    assert "Slurm is not installed (missing munged" in out and "apt-get install" in out
