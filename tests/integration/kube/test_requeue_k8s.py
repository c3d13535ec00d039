"""The Kubernetes requeue actuator on the real control plane: the Job controller recreates the
job's pods from the relocated Job, the scheduler binds them only to allowed nodes, at the
failover priority; a repeated command creates nothing more."""

from __future__ import annotations

import pytest
from lightkube.resources.batch_v1 import Job

from consumers.requeue.kubernetes import KubernetesScheduler
from consumers.requeue.stage import NotActionable, Outcome
from schemas.decisions import Decision
from schemas.requeue import RequeueCommand
from tests.integration.kube.training_jobs import (
    FAILOVER_CLASS,
    FAILOVER_PRIORITY,
    ensure_extra_nodes,
    ensure_failover_priority_class,
    jobs_of,
    pods_of,
    report_failed,
    report_running,
    training_job,
    wait_bound,
)
from tests.integration.kube_cluster import KubeCluster, wait_for


def command(job_id: str, attempt: int, exclude: tuple[str, ...]) -> RequeueCommand:
    return RequeueCommand(job_id, attempt, attempt + 1, None, exclude, 100, "hardware.failover",
                          "hardware", "failover", 1, 1)  # fmt: skip


async def test_a_failover_recreates_the_job_away_from_the_nodes_once(
    kube: KubeCluster, kube_namespace: str
) -> None:
    admin = kube.client()
    ensure_failover_priority_class(admin)
    ensure_extra_nodes(kube)
    admin.create(training_job(kube_namespace, "train", "train-7", pods=4))
    first = wait_bound(admin, kube_namespace, "train-7", 0, 4)
    for pod in first:
        report_running(admin, pod)
    bad = first[1].spec.nodeName
    report_failed(admin, first[1], 1, "Error")  # the GPU fell off the bus under it
    quarantined = "gpu-1" if bad != "gpu-1" else "gpu-2"  # another node already quarantined

    async_client = kube.async_client()
    try:
        scheduler = KubernetesScheduler(async_client, namespace=kube_namespace)
        await scheduler.check()
        cmd = command("train-7", 0, tuple(sorted({bad, quarantined})))
        assert await scheduler.requeue(cmd) == Outcome("requeued", 1)
        moved = wait_bound(admin, kube_namespace, "train-7", 1, 4)
        assert {p.spec.nodeName for p in moved}.isdisjoint({bad, quarantined})
        assert all(p.spec.priorityClassName == FAILOVER_CLASS for p in moved)
        assert all(p.spec.priority == FAILOVER_PRIORITY for p in moved)
        (job,) = jobs_of(admin, kube_namespace, "train-7")  # the old Job is being deleted
        assert job.metadata.name == "train-r1"
        uid = job.metadata.uid

        # Redelivered (or repeated after a crash): nothing new is created.
        assert await scheduler.requeue(cmd) == Outcome("completed", 1)
        assert [j.metadata.uid for j in jobs_of(admin, kube_namespace, "train-7")] == [uid]
        assert len(pods_of(admin, kube_namespace, "train-7", 1)) == 4
        # A command for an attempt the job has left behind is stale.
        assert (await scheduler.requeue(command("train-7", 3, ()))).what == "stale"
        wait_for("the old Job gone", lambda: not _exists(admin, kube_namespace, "train"), 60)
    finally:
        await async_client.close()


async def test_a_rejected_job_is_annotated_and_left_alone_and_a_missing_one_is_not_retried(
    kube: KubeCluster, kube_namespace: str
) -> None:
    admin = kube.client()
    admin.create(training_job(kube_namespace, "oom", "oom-1", pods=1))
    (pod,) = wait_bound(admin, kube_namespace, "oom-1", 0, 1)
    report_failed(admin, pod, 137, "OOMKilled")
    async_client = kube.async_client()
    try:
        scheduler = KubernetesScheduler(async_client, namespace=kube_namespace)
        d = Decision("oom-1", 0, "software", "reject", "Pending-internalerror", (), None, (),
                     "software.reject", 1, 2)  # fmt: skip
        assert await scheduler.leave_ended(d) == Outcome("ended", 0)
        assert await scheduler.leave_ended(d) == Outcome("ended", 0)  # idempotent
        (job,) = jobs_of(admin, kube_namespace, "oom-1")
        assert job.metadata.annotations["gpufailover.io/decision"] == (
            "software -> reject (software.reject), attempt 0, not requeued"
        )
        with pytest.raises(NotActionable, match="no Job labelled"):
            await scheduler.requeue(command("no-such-job", 0, ()))
    finally:
        await async_client.close()


def _exists(client: object, namespace: str, name: str) -> bool:
    from lightkube import ApiError

    try:
        client.get(Job, name, namespace=namespace)  # type: ignore[attr-defined]
    except ApiError:
        return False
    return True


async def test_a_missing_failover_priority_class_refuses_to_start(kube: KubeCluster) -> None:
    async_client = kube.async_client()
    try:
        scheduler = KubernetesScheduler(async_client, failover_priority_class="no-such-class")
        with pytest.raises(SystemExit, match="PriorityClass 'no-such-class' does not exist"):
            await scheduler.check()
    finally:
        await async_client.close()
