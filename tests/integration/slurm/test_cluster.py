"""The fixture's cluster does what the other Slurm tests rely on."""

from __future__ import annotations

from tests.integration.slurm_cluster import NODES, SlurmCluster


def test_a_two_node_gpu_job_runs_and_a_drain_keeps_it_running(slurm: SlurmCluster) -> None:
    job = slurm.sbatch("-N", "2", "--gres=gpu:8", "--requeue", "--wrap", "sleep 300")
    slurm.wait_job(job, "running", lambda j: j.get("JobState") == "RUNNING")
    node = slurm.job(job)["NodeList"]
    assert node in ("gpu-[1-2]", "gpu-[2-3]", "gpu-[3-4]", "gpu-[1,3]", "gpu-[1,4]", "gpu-[2,4]")
    slurm.run("scontrol", "update", "NodeName=gpu-1", "State=DRAIN", "Reason=fixture check")
    assert "DRAIN" in slurm.node_state("gpu-1")
    assert slurm.job(job)["JobState"] == "RUNNING"
    slurm.reset()
    assert all(slurm.node_state(n) == "IDLE" for n in NODES)
