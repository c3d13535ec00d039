"""The Slurm side of a requeue against the real cluster (the pipeline tests drive it from Kafka)."""

from __future__ import annotations

import pytest

from consumers.requeue.slurm import NotActionable, SlurmScheduler
from schemas.requeue import RequeueCommand
from tests.integration.slurm_cluster import SlurmCluster


def command(job_id: str, attempt: int = 0, exclude: tuple[str, ...] = ("gpu-2",)) -> RequeueCommand:
    return RequeueCommand(
        job_id=job_id,
        attempt=attempt,
        next_attempt=attempt + 1,
        spec=None,
        exclude_nodes=exclude,
        priority=100,
        reason="hardware.failover",
        verdict="hardware",
        action="failover",
        decided_ts_ms=1,
        ts_ms=1,
    )


@pytest.fixture
def scheduler(slurm: SlurmCluster, monkeypatch: pytest.MonkeyPatch) -> SlurmScheduler:
    monkeypatch.setenv("SLURM_CONF", str(slurm.conf))
    return SlurmScheduler(failover_boost=1000)


async def test_a_failed_job_is_requeued_once_same_jobid_excluding_and_boosted(
    slurm: SlurmCluster, scheduler: SlurmScheduler
) -> None:
    job = slurm.sbatch("-N", "2", "--wrap", "exit 3")
    slurm.wait_job(job, "failed", lambda j: j.get("JobState") == "FAILED")
    assert slurm.job(job)["NodeList"] == "gpu-[1-2]"  # an idle cluster fills from gpu-1
    before = int(slurm.job(job)["Priority"])
    outcome = await scheduler.requeue(command(job))
    assert (outcome.what, outcome.restarts) == ("requeued", 1)
    again = await scheduler.requeue(command(job))  # redelivered
    assert again.what in ("completed", "running")
    info = slurm.job(job)
    assert info["Restarts"] == "1" and info["ExcNodeList"] == "gpu-2"
    assert int(info["Priority"]) == before + 1000
    assert info["Comment"].startswith("gpufailover: hardware -> failover")
    # Placed again: not pending any more and given nodes (a loaded host can show a state
    # between the two for a moment, with no nodes yet).
    # The fields as seen placed: the job (`exit 3`) ends at once, and a later query can find it
    # between states again.
    placed = slurm.wait_job(
        job,
        "ran again",
        lambda j: j.get("JobState") != "PENDING" and j.get("NodeList", "") not in ("", "(null)"),
    )
    assert placed["NodeList"] in ("gpu-[3-4]", "gpu-[1,3]", "gpu-[1,4]")


async def test_a_job_slurm_forgot_or_may_not_requeue_is_not_actionable(
    slurm: SlurmCluster, scheduler: SlurmScheduler
) -> None:
    with pytest.raises(NotActionable, match="no longer knows"):
        await scheduler.requeue(command("999999"))
    job = slurm.sbatch("--no-requeue", "--wrap", "exit 3")
    slurm.wait_job(job, "failed", lambda j: j.get("JobState") == "FAILED")
    with pytest.raises(NotActionable, match="refuses"):
        await scheduler.requeue(command(job))


async def test_after_slurms_own_requeue_only_the_exclusion_and_priority_are_added(
    slurm: SlurmCluster, scheduler: SlurmScheduler
) -> None:
    # A 4-node job cannot start again while gpu-2 is down: it stays pending for the check.
    job = slurm.sbatch("-N", "4", "--requeue", "--wrap", "sleep 300")
    slurm.wait_job(job, "running", lambda j: j.get("JobState") == "RUNNING")
    before = int(slurm.job(job)["Priority"])
    slurm.run("scontrol", "update", "NodeName=gpu-2", "State=DOWN", "Reason=test node loss")
    slurm.wait_job(job, "requeued by Slurm", lambda j: j.get("Restarts") == "1"
                   and j.get("JobState") == "PENDING")  # fmt: skip
    outcome = await scheduler.requeue(command(job, attempt=0))
    assert (outcome.what, outcome.restarts) == ("completed", 1)
    info = slurm.job(job)
    assert info["Restarts"] == "1" and info["ExcNodeList"] == "gpu-2"
    assert int(info["Priority"]) == before + 1000
    again = await scheduler.requeue(command(job, attempt=0))  # redelivered: no second boost
    assert again.what == "completed" and int(slurm.job(job)["Priority"]) == before + 1000
