"""deploy/k8s's roles for the Kubernetes requeue and k8s-events on the real API server: with the
component's ServiceAccount token each does its whole job and is refused anything else."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.batch_v1 import Job
from lightkube.resources.core_v1 import Node, Pod, Secret
from lightkube.resources.scheduling_v1 import PriorityClass

from consumers.requeue.kubernetes import KubernetesScheduler
from consumers.requeue.stage import Outcome
from schemas.decisions import Decision
from schemas.requeue import RequeueCommand
from tests.integration.kube.test_rbac import install, refused
from tests.integration.kube.training_jobs import (
    ensure_extra_nodes,
    jobs_of,
    report_failed,
    training_job,
    wait_bound,
)
from tests.integration.kube_cluster import KubeCluster


@pytest.fixture
def accounts_namespace(kube: KubeCluster, kube_namespace: str) -> Iterator[str]:
    yield kube_namespace
    from lightkube.resources.rbac_authorization_v1 import ClusterRoleBinding

    client = kube.client()
    for binding in client.list(ClusterRoleBinding):  # cluster-wide: point them nowhere again
        if any(s.namespace == kube_namespace for s in binding.subjects or []):
            client.delete(ClusterRoleBinding, binding.metadata.name)


async def test_requeue_role_is_enough_to_relocate_and_annotate_jobs_and_nothing_more(
    kube: KubeCluster, accounts_namespace: str
) -> None:
    ns, admin = accounts_namespace, kube.client()
    install(kube, ns, "serviceaccounts.yaml", "rbac-requeue.yaml", "priorityclass.yaml")
    token = kube.service_account_token(ns, "gpufailover-consumers", create=False)
    ensure_extra_nodes(kube)
    admin.create(training_job(ns, "train", "rbac-train", pods=2))
    admin.create(training_job(ns, "oom", "rbac-oom", pods=1))
    pods = wait_bound(admin, ns, "rbac-train", 0, 2)
    report_failed(admin, pods[0], 1, "Error")
    scheduler = KubernetesScheduler(kube.async_client(token), namespace=None)  # cluster-wide
    try:
        await scheduler.check()
        cmd = RequeueCommand("rbac-train", 0, 1, None, (pods[0].spec.nodeName,), 100,
                             "hardware.failover", "hardware", "failover", 1, 1)  # fmt: skip
        assert await scheduler.requeue(cmd) == Outcome("requeued", 1)
        assert await scheduler.requeue(cmd) == Outcome("completed", 1)
        d = Decision("rbac-oom", 0, "software", "reject", "Pending-internalerror", (), None, (),
                     "software.reject", 1, 2)  # fmt: skip
        assert await scheduler.leave_ended(d) == Outcome("ended", 0)
    finally:
        await scheduler.client.close()
    assert [j.metadata.name for j in jobs_of(admin, ns, "rbac-train")] == ["train-r1"]
    wait_bound(admin, ns, "rbac-train", 1, 2)

    as_sa = kube.client(token)
    assert refused(lambda: as_sa.delete(Node, "gpu-2"))
    assert refused(lambda: as_sa.patch(Node, "gpu-2", {"spec": {"unschedulable": True}}))
    assert refused(lambda: list(as_sa.list(Pod, namespace=ns)))
    assert refused(lambda: as_sa.create(Pod(metadata=ObjectMeta(name="rogue", namespace=ns))))
    assert refused(lambda: as_sa.delete(PriorityClass, "gpufailover-failover"))
    assert refused(lambda: as_sa.get(Job, "train-r1", namespace=ns))  # list only, by label
    assert refused(lambda: as_sa.get(Secret, "any", namespace=ns))


def test_k8s_events_role_can_list_and_watch_pods_only(
    kube: KubeCluster, accounts_namespace: str
) -> None:
    ns, admin = accounts_namespace, kube.client()
    install(kube, ns, "rbac-k8s-events.yaml")
    token = kube.service_account_token(ns, "gpufailover-k8s-events", create=False)
    admin.create(training_job(ns, "w", "rbac-watch", pods=1))
    wait_bound(admin, ns, "rbac-watch", 0, 1)
    as_sa = kube.client(token)
    labels = {"gpufailover.io/job-id": "rbac-watch"}
    assert len(list(as_sa.list(Pod, namespace=ns, labels=labels))) == 1
    kind, pod = next(iter(as_sa.watch(Pod, namespace=ns, labels=labels, server_timeout=5)))
    assert (kind, pod.metadata.labels["gpufailover.io/job-id"]) == ("ADDED", "rbac-watch")
    assert refused(lambda: list(as_sa.list(Job, namespace=ns)))
    assert refused(lambda: as_sa.delete(Pod, pod.metadata.name, namespace=ns))
    assert refused(lambda: as_sa.delete(Node, "gpu-1"))
