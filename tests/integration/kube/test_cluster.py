"""The fixture's control plane is real: GPU nodes Ready, pods scheduled, RBAC enforced."""

from __future__ import annotations

import pytest
from lightkube import ApiError
from lightkube.models.core_v1 import (
    Affinity,
    Container,
    NodeAffinity,
    NodeSelector,
    NodeSelectorRequirement,
    NodeSelectorTerm,
    PodSpec,
    ResourceRequirements,
)
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Node, Pod

from tests.integration.kube_cluster import NODES, KubeCluster, running_kube_cluster, wait_for


def test_nodes_are_ready_gpu_nodes_without_taints(kube: KubeCluster) -> None:
    nodes = {n.metadata.name: n for n in kube.client().list(Node)}
    assert sorted(nodes) == sorted(NODES)
    for node in nodes.values():
        assert node.status.allocatable["nvidia.com/gpu"] == "8"
        ready = [c for c in node.status.conditions if c.type == "Ready"]
        assert [c.status for c in ready] == ["True"]
        assert not node.spec.taints
        assert not node.spec.unschedulable


def test_scheduler_binds_a_gpu_pod_to_an_allowed_node(
    kube: KubeCluster, kube_namespace: str
) -> None:
    allowed = NODES[-1]
    excluded = [n for n in NODES if n != allowed]
    affinity = Affinity(
        nodeAffinity=NodeAffinity(
            requiredDuringSchedulingIgnoredDuringExecution=NodeSelector(
                nodeSelectorTerms=[
                    NodeSelectorTerm(
                        matchExpressions=[
                            NodeSelectorRequirement(
                                key="kubernetes.io/hostname", operator="NotIn", values=excluded
                            )
                        ]
                    )
                ]
            )
        )
    )
    gpus = ResourceRequirements(limits={"nvidia.com/gpu": "8"})
    pod = Pod(
        metadata=ObjectMeta(name="trainer", namespace=kube_namespace),
        spec=PodSpec(
            affinity=affinity,
            containers=[Container(name="main", image="example.invalid/train", resources=gpus)],
        ),
    )
    client = kube.client()
    client.create(pod)

    def bound() -> bool:
        return bool(client.get(Pod, "trainer", namespace=kube_namespace).spec.nodeName)

    wait_for("the scheduler to bind the pod", bound, 30)
    assert client.get(Pod, "trainer", namespace=kube_namespace).spec.nodeName == allowed


def test_a_principal_without_a_role_is_refused(kube: KubeCluster) -> None:
    with pytest.raises(ApiError) as refused:
        kube.client(kube.tokens["nobody"]).get(Node, NODES[0])
    assert refused.value.status.code == 403
    assert 'User "nobody"' in (refused.value.status.message or "")


def test_a_service_account_token_authenticates_as_that_account(
    kube: KubeCluster, kube_namespace: str
) -> None:
    token = kube.service_account_token(kube_namespace, "probe")
    with pytest.raises(ApiError) as refused:
        list(kube.client(token).list(Node))
    assert refused.value.status.code == 403
    assert f"system:serviceaccount:{kube_namespace}:probe" in (refused.value.status.message or "")


def test_a_cluster_leaves_no_process_and_no_files_behind() -> None:
    with running_kube_cluster(nodes=("solo",)) as cluster:
        assert [n.metadata.name for n in cluster.client().list(Node)] == ["solo"]
        procs = list(cluster.processes.values())
        assert len(procs) == 4 and all(p.poll() is None for p in procs)
    assert all(p.poll() is not None for p in procs)
    assert not cluster.base.exists()


def test_a_test_can_add_a_node_and_reset_removes_it(kube: KubeCluster) -> None:
    kube.create_gpu_node("gpu-9", gpus=4, labels={"pool": "spare"})
    added = kube.client().get(Node, "gpu-9")
    assert added.status.allocatable["nvidia.com/gpu"] == "4"
    assert added.metadata.labels["pool"] == "spare" and not added.spec.taints
    kube.reset()
    assert sorted(n.metadata.name for n in kube.client().list(Node)) == sorted(NODES)
