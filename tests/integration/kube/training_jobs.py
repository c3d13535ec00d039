"""Training jobs on the test control plane, and what a kubelet would report about their pods.

There is no kubelet: a test moves a pod to Running or Failed by writing its status the way a
kubelet does (the status subresource), and the Job controller and the scheduler react to it as
they would on a real cluster."""

from __future__ import annotations

import contextlib
from datetime import UTC, datetime
from typing import Any

from lightkube import ApiError, Client
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.batch_v1 import Job
from lightkube.resources.core_v1 import Node, Pod
from lightkube.resources.scheduling_v1 import PriorityClass
from lightkube.types import PatchType

from tests.integration.kube_cluster import KubeCluster, wait_for

FAILOVER_CLASS = "gpufailover-failover"
FAILOVER_PRIORITY = 1_000_000
EXTRA_NODES = tuple(f"gpu-{i}" for i in range(5, 10))  # room for a 4-pod job to move, and more


def now_rfc3339() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def ensure_failover_priority_class(client: Client) -> None:
    with contextlib.suppress(ApiError):
        client.create(
            PriorityClass(
                metadata=ObjectMeta(name=FAILOVER_CLASS),
                value=FAILOVER_PRIORITY,
                description="training jobs relocated by gpufailover",
            )
        )


def ensure_extra_nodes(kube: KubeCluster) -> None:
    client = kube.client()
    have = {n.metadata.name for n in client.list(Node)}
    for name in EXTRA_NODES:
        if name not in have:
            kube.create_gpu_node(name)


def training_job(namespace: str, name: str, job_id: str, pods: int, gpus: int = 8) -> Job:
    """An Indexed Job, one pod per node (all of a node's GPUs), failed on the first pod
    failure (backoffLimit 0) so that gpufailover, not the Job controller, decides the restart."""
    container = {
        "name": "trainer",
        "image": "registry.example.invalid/trainer:1",
        "resources": {"limits": {"nvidia.com/gpu": str(gpus)}},
    }
    return Job.from_dict(  # type: ignore[return-value]
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": name, "namespace": namespace,
                         "labels": {"gpufailover.io/job-id": job_id}},
            "spec": {
                "completions": pods,
                "parallelism": pods,
                "completionMode": "Indexed",
                "backoffLimit": 0,
                "template": {
                    "metadata": {"labels": {"gpufailover.io/job-id": job_id}},
                    "spec": {"restartPolicy": "Never", "containers": [container]},
                },
            },
        }
    )  # fmt: skip


def pods_of(client: Client, namespace: str, job_id: str, attempt: int | None = None) -> list[Pod]:
    pods = client.list(Pod, namespace=namespace, labels={"gpufailover.io/job-id": job_id})
    out = []
    for p in pods:
        labels = p.metadata.labels or {}
        if attempt is None or int(labels.get("gpufailover.io/attempt", "0")) == attempt:
            out.append(p)
    return sorted(out, key=lambda p: p.metadata.name)


def wait_bound(
    client: Client, namespace: str, job_id: str, attempt: int, count: int, timeout_s: float = 60
) -> list[Pod]:
    """The attempt's `count` pods once the scheduler has bound each to a node."""
    found: list[Pod] = []

    def bound() -> bool:
        nonlocal found
        found = [
            p
            for p in pods_of(client, namespace, job_id, attempt)
            if p.spec.nodeName and not p.metadata.deletionTimestamp
        ]
        return len(found) == count

    wait_for(f"{count} pods of {job_id} attempt {attempt} bound", bound, timeout_s)
    return found


def _container(state: dict[str, Any]) -> list[dict[str, Any]]:
    image = "registry.example.invalid/trainer:1"
    return [{"name": "trainer", "ready": "running" in state, "restartCount": 0, "image": image,
             "imageID": "", "state": state}]  # fmt: skip


def report_running(client: Client, pod: Pod) -> None:
    t = now_rfc3339()
    status = {"phase": "Running", "startTime": t,
              "containerStatuses": _container({"running": {"startedAt": t}})}  # fmt: skip
    client.patch(Pod.Status, pod.metadata.name, {"status": status},
                 namespace=pod.metadata.namespace, patch_type=PatchType.MERGE)  # fmt: skip


def report_failed(client: Client, pod: Pod, exit_code: int, reason: str) -> None:
    t = now_rfc3339()
    terminated = {"exitCode": exit_code, "reason": reason, "startedAt": t, "finishedAt": t}
    status = {"phase": "Failed", "containerStatuses": _container({"terminated": terminated})}
    client.patch(Pod.Status, pod.metadata.name, {"status": status},
                 namespace=pod.metadata.namespace, patch_type=PatchType.MERGE)  # fmt: skip


def report_image_pull_backoff(client: Client, pod: Pod) -> None:
    waiting = {"reason": "ImagePullBackOff", "message": "Back-off pulling image"}
    status = {"phase": "Pending", "containerStatuses": _container({"waiting": waiting})}
    client.patch(Pod.Status, pod.metadata.name, {"status": status},
                 namespace=pod.metadata.namespace, patch_type=PatchType.MERGE)  # fmt: skip


def jobs_of(client: Client, namespace: str, job_id: str) -> list[Job]:
    jobs = client.list(Job, namespace=namespace, labels={"gpufailover.io/job-id": job_id})
    return sorted(
        (j for j in jobs if not j.metadata.deletionTimestamp), key=lambda j: j.metadata.name
    )
