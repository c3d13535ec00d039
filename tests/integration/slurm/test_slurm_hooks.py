"""slurmctld's own PrologSlurmctld/EpilogSlurmctld running the example hook
(examples/slurm/gpufailover-slurm-event.sh): the events on jobs.events for jobs that really
completed, failed, were cancelled or lost a node."""

from __future__ import annotations

from typing import Any

from schemas.topics import TopicNames
from tests.integration.kafka_io import Rec, wait_for
from tests.integration.slurm_cluster import SlurmCluster


def _events(recs: list[Rec], job: str) -> list[dict[str, Any]]:
    return [r.value for r in recs if r.key == job]


async def test_the_hooks_publish_what_slurmctld_saw(
    slurm: SlurmCluster, kafka_bootstrap: str, topic_names: TopicNames
) -> None:
    slurm.install_hooks(kafka_bootstrap, topic_names.prefix)
    # Pinned: a job still completing on a node taken down stays COMPLETING for a long time.
    ok = slurm.sbatch("-N", "2", "-w", "gpu-[1-2]", "--wrap", "true")
    failed = slurm.sbatch("-w", "gpu-2", "--wrap", "exit 3")
    cancelled = slurm.sbatch("-w", "gpu-1", "--wrap", "sleep 300")
    node_lost = slurm.sbatch("--no-requeue", "-w", "gpu-4", "--wrap", "sleep 300")
    requeued = slurm.sbatch("--requeue", "-w", "gpu-3", "--wrap", "sleep 300")
    for job in (cancelled, node_lost, requeued):
        slurm.wait_job(job, "running", lambda j: j.get("JobState") == "RUNNING")
    slurm.run("scancel", cancelled)
    slurm.wait_job(cancelled, "cancelled", lambda j: j.get("JobState") == "CANCELLED")
    slurm.run("scontrol", "update", "NodeName=gpu-4", "State=DOWN", "Reason=test node loss")
    slurm.run("scontrol", "update", "NodeName=gpu-3", "State=DOWN", "Reason=test node loss")
    jobs = (ok, failed, cancelled, node_lost, requeued)

    def ended(recs: list[Rec]) -> bool:
        return all(any(e["type"] != "started" for e in _events(recs, j)) for j in jobs)

    try:
        recs = await wait_for(kafka_bootstrap, [topic_names.jobs_events], ended, timeout_s=90)
    except AssertionError as exc:
        jobs_now = "\n".join(f"{j}: {slurm.job(j)}" for j in jobs)
        raise AssertionError(
            f"{exc}\njobs:\n{jobs_now}\nhook log:\n{slurm.hook_log.read_text()}"
        ) from None

    def end(job: str) -> tuple[Any, ...]:
        [e] = [e for e in _events(recs, job) if e["type"] != "started"]
        return (e["type"], e["attempt"], e.get("exit_code"), e.get("reason"), e["nodes"])

    assert end(ok) == ("succeeded", 0, 0, None, ["gpu-1", "gpu-2"])
    assert end(failed)[:4] == ("terminated", 0, 3, None)
    assert end(cancelled)[:2] == ("cancelled", 0)
    assert end(node_lost) == ("terminated", 0, 0, "WorkerLost", ["gpu-4"])
    assert end(requeued) == ("terminated", 0, 0, "WorkerLost", ["gpu-3"])
    started = [e for e in _events(recs, ok) if e["type"] == "started"]
    assert [(e["attempt"], e["nodes"]) for e in started] == [(0, ["gpu-1", "gpu-2"])]


async def test_a_job_past_its_time_limit_is_published_as_time_limit(
    slurm: SlurmCluster, kafka_bootstrap: str, topic_names: TopicNames
) -> None:
    # Slurm's limits are in minutes and checked every ~30 s: this test takes about 80 s.
    slurm.install_hooks(kafka_bootstrap, topic_names.prefix)
    job = slurm.sbatch("-t", "1", "--wrap", "sleep 300")
    recs = await wait_for(
        kafka_bootstrap,
        [topic_names.jobs_events],
        lambda rs: any(e["type"] != "started" for e in _events(rs, job)),
        timeout_s=150,
    )
    [end] = [e for e in _events(recs, job) if e["type"] != "started"]
    assert (end["type"], end["attempt"], end["reason"]) == ("terminated", 0, "TimeLimit")
    assert slurm.job(job)["JobState"] == "TIMEOUT"
