"""examples/slurm/gpufailover-slurm-event.sh in the cases slurmctld's hooks really meet (see
docs/slurm.md): the restart count they get, Slurm's own requeue, scontrol's requeue, spot jobs.
Run as slurmctld runs it: a bare environment, a stand-in `scontrol` printing the job record,
and the real `gpufailover publish --dry-run`. The real thing: tests/integration/slurm/."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

SCRIPT = Path(__file__).resolve().parents[3] / "examples" / "slurm" / "gpufailover-slurm-event.sh"
EPILOG = {
    "SLURM_SCRIPT_CONTEXT": "epilog_slurmctld",
    "SLURM_JOB_ID": "7",
    "SLURM_JOB_NODELIST": "gpu-[1-2]",
    "SLURM_JOB_PARTITION": "gpu",
    "SLURM_JOB_EXIT_CODE2": "0:0",
}


@pytest.fixture
def world(tmp_path: Path) -> Path:
    (tmp_path / "bin").mkdir()
    gpufailover = tmp_path / "bin" / "gpufailover-dry"
    gpufailover.write_text(f'#!/bin/sh\nexec {sys.executable} -m gpufailover "$@" --dry-run\n')
    gpufailover.chmod(0o755)
    (tmp_path / "slurm.env").write_text(
        f"GPUFAILOVER_BIN={gpufailover}\nGPUFAILOVER_SLURM_SPOT_PARTITIONS=spot,cheap\n"
    )
    return tmp_path


def job(world: Path, state: str, restarts: int, reason: str = "None") -> None:
    line = (
        f"JobId=7 JobName=train Priority=1 Partition=gpu JobState={state} Reason={reason} "
        f"Requeue=1 Restarts={restarts} BatchFlag=1 ExitCode=0:0 NodeList=gpu-[1-2] QOS=normal"
    )
    scontrol = world / "bin" / "scontrol"
    scontrol.write_text(f"#!/bin/sh\ncat <<'EOF'\n{line}\nEOF\n")
    scontrol.chmod(0o755)


def run(world: Path, env: dict[str, str]) -> tuple[Any, str]:
    base = {
        "PATH": f"{world / 'bin'}:/usr/bin:/bin",
        "GPUFAILOVER_SLURM_ENV": str(world / "slurm.env"),
    }
    done = subprocess.run(["bash", str(SCRIPT)], env={**base, **env}, capture_output=True,
                          text=True, timeout=60, check=True)  # fmt: skip
    return (orjson.loads(done.stdout)["value"] if done.stdout.strip() else None), done.stderr


def test_the_attempt_is_the_hooks_restart_count(world: Path) -> None:
    job(world, "FAILED", restarts=2, reason="NonZeroExitCode")
    event, _ = run(world, {**EPILOG, "SLURM_JOB_RESTART_COUNT": "2", "SLURM_JOB_EXIT_CODE2": "1:0"})
    assert (event["type"], event["attempt"], event["exit_code"]) == ("terminated", 2, 1)


def test_slurms_own_requeue_after_a_node_failure_is_a_lost_worker_of_the_old_attempt(
    world: Path,
) -> None:
    job(world, "PENDING", restarts=1)  # Restarts already bumped; the hook has the old count
    event, _ = run(world, {**EPILOG, "SLURM_JOB_RESTART_COUNT": "0"})
    assert (event["type"], event["attempt"], event["reason"]) == ("terminated", 0, "WorkerLost")
    assert event["nodes"] == ["gpu-1", "gpu-2"]


def test_a_requeue_by_scontrol_publishes_nothing(world: Path) -> None:
    job(world, "PENDING", restarts=1, reason="job_requeued_in_held_state")
    event, stderr = run(world, {**EPILOG, "SLURM_JOB_RESTART_COUNT": "1"})
    assert event is None and "requeued by scontrol" in stderr


def test_a_node_down_reason_is_a_lost_worker_and_a_spot_partition_marks_the_job(
    world: Path,
) -> None:
    job(world, "FAILED", restarts=0, reason="NodeDown")
    env = {**EPILOG, "SLURM_JOB_RESTART_COUNT": "0", "SLURM_JOB_PARTITION": "cheap"}
    event, _ = run(world, env)
    assert (event["reason"], event["training_type"]) == ("WorkerLost", "spot")
