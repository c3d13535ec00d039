"""examples/slurm/gpufailover-slurm-event.sh, run the way slurmctld runs it: a bare environment,
a stand-in `scontrol`, and the real `gpufailover publish --dry-run` behind GPUFAILOVER_BIN."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

SCRIPT = Path(__file__).resolve().parents[3] / "examples" / "slurm" / "gpufailover-slurm-event.sh"


@pytest.fixture
def world(tmp_path: Path) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    gpufailover = bin_dir / "gpufailover-dry"
    gpufailover.write_text(f'#!/bin/sh\nexec {sys.executable} -m gpufailover "$@" --dry-run\n')
    gpufailover.chmod(0o755)
    (tmp_path / "slurm.env").write_text(f"GPUFAILOVER_BIN={gpufailover}\n")
    return tmp_path


def fake_scontrol(world: Path, line: str | None) -> None:
    scontrol = world / "bin" / "scontrol"
    body = f"cat <<'EOF'\n{line}\nEOF\n" if line is not None else "exit 1\n"
    scontrol.write_text("#!/bin/sh\n" + body)
    scontrol.chmod(0o755)


def run(world: Path, env: dict[str, str]) -> tuple[int, Any, str]:
    base = {
        "PATH": f"{world / 'bin'}:/usr/bin:/bin",
        "GPUFAILOVER_SLURM_ENV": str(world / "slurm.env"),
    }
    result = subprocess.run(
        ["bash", str(SCRIPT)], env={**base, **env}, capture_output=True, text=True, timeout=60
    )
    published = orjson.loads(result.stdout)["value"] if result.stdout.strip() else None
    return result.returncode, published, result.stderr


def job_line(state: str, restarts: int = 0, reason: str = "None") -> str:
    return (
        f"JobId=4242 JobName=train UserId=alice(1000) Priority=1 JobState={state} "
        f"Reason={reason} Dependency=(null) Requeue=1 Restarts={restarts} BatchFlag=1 "
        f"ExitCode=0:0 NodeList=gpu-[01-02] NumNodes=2"
    )


EPILOG = {
    "SLURM_SCRIPT_CONTEXT": "epilog_slurmctld",
    "SLURM_JOB_ID": "4242",
    "SLURM_JOB_NODELIST": "gpu-[01-02]",
}


def test_oom_becomes_oomkilled_with_the_requeue_count_as_attempt(world: Path) -> None:
    fake_scontrol(world, job_line("OUT_OF_MEMORY", restarts=2, reason="OutOfMemory"))
    rc, event, _ = run(world, {**EPILOG, "SLURM_JOB_EXIT_CODE2": "0:9"})
    assert rc == 0
    assert event["type"] == "terminated"
    assert (event["job_id"], event["attempt"], event["nodes"]) == ("4242", 2, ["gpu-01", "gpu-02"])
    assert (event["exit_code"], event["reason"]) == (137, "OOMKilled")


@pytest.mark.parametrize(
    ("state", "exit2", "kind", "exit_code", "reason"),
    [
        ("FAILED", "1:0", "terminated", 1, None),
        ("FAILED", "0:6", "terminated", 134, "Signal:ABRT"),
        ("FAILED", "137:0", "terminated", 137, "Signal:KILL"),  # a shell reporting its child
        ("NODE_FAIL", "0:0", "terminated", 0, "WorkerLost"),
        ("TIMEOUT", "0:15", "terminated", 143, "TimeLimit"),
        ("PREEMPTED", "0:15", "terminated", 143, "Preempted"),
        ("COMPLETED", "0:0", "succeeded", 0, None),
        ("CANCELLED", "0:15", "cancelled", 143, None),
    ],
)
def test_job_states_and_exit_codes(
    world: Path, state: str, exit2: str, kind: str, exit_code: int, reason: str | None
) -> None:
    fake_scontrol(world, job_line(state))
    rc, event, _ = run(world, {**EPILOG, "SLURM_JOB_EXIT_CODE2": exit2})
    assert rc == 0
    assert (event["type"], event.get("exit_code"), event.get("reason")) == (kind, exit_code, reason)
    assert event["attempt"] == 0


def test_jobcomp_script_environment(world: Path) -> None:
    fake_scontrol(world, job_line("OUT_OF_MEMORY", restarts=1))
    env = {"JOBID": "77", "EXITCODE": "0:9", "NODES": "gpu-07", "JOBSTATE": "OUT_OF_MEMORY"}
    rc, event, _ = run(world, env)
    assert rc == 0
    assert (event["job_id"], event["attempt"], event["nodes"], event["reason"]) == (
        "77",
        1,
        ["gpu-07"],
        "OOMKilled",
    )


def test_prolog_publishes_started(world: Path) -> None:
    fake_scontrol(world, job_line("RUNNING", restarts=3))
    env = {**EPILOG, "SLURM_SCRIPT_CONTEXT": "prolog_slurmctld"}
    rc, event, _ = run(world, env)
    assert rc == 0
    assert (event["type"], event["attempt"], event["nodes"]) == (
        "started",
        3,
        ["gpu-01", "gpu-02"],
    )


def test_without_scontrol_the_restart_count_and_exit_code_still_work(world: Path) -> None:
    fake_scontrol(world, None)
    env = {**EPILOG, "SLURM_JOB_EXIT_CODE2": "2:0", "SLURM_RESTART_COUNT": "1"}
    rc, event, _ = run(world, env)
    assert rc == 0
    assert (event["type"], event["attempt"], event["exit_code"]) == ("terminated", 1, 2)


def test_a_job_without_nodes_publishes_nothing(world: Path) -> None:
    fake_scontrol(world, job_line("FAILED"))
    env = {**EPILOG, "SLURM_JOB_NODELIST": "(null)", "SLURM_JOB_EXIT_CODE2": "1:0"}
    rc, event, stderr = run(world, env)
    assert (rc, event) == (0, None)
    assert "without nodes" in stderr


def test_a_publish_failure_never_fails_the_job(world: Path) -> None:
    fake_scontrol(world, job_line("FAILED"))
    failing = world / "bin" / "gpufailover-broken"
    failing.write_text("#!/bin/sh\necho 'gpufailover publish: could not publish' >&2\nexit 1\n")
    failing.chmod(0o755)
    (world / "slurm.env").write_text(f"GPUFAILOVER_BIN={failing}\n")
    rc, event, stderr = run(world, {**EPILOG, "SLURM_JOB_EXIT_CODE2": "1:0"})
    assert (rc, event) == (0, None)
    assert "could not publish terminated for job 4242" in stderr
