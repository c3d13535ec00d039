"""deploy/k8s's RBAC on the real API server: each component's ServiceAccount token can do its
job and is refused anything else."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from lightkube import ApiError, codecs
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Node, Pod, Secret

from consumers.quarantine.actions import QUARANTINE, RELEASE
from consumers.quarantine.actuator_k8s import KubernetesActuator
from schemas.decisions import Evidence
from schemas.quarantine import QuarantineRecord
from tests.integration.kube_cluster import KubeCluster

K8S = Path(__file__).resolve().parents[3] / "deploy" / "k8s"
FORBIDDEN = 403


def install(kube: KubeCluster, namespace: str, *files: str) -> None:
    """Apply manifests (server-side) with their ServiceAccounts in `namespace`."""
    client = kube.client()
    for name in files:
        for obj in codecs.load_all_yaml((K8S / name).read_text()):
            if obj.kind == "ServiceAccount" and obj.metadata is not None:
                obj.metadata.namespace = namespace
            for subject in getattr(obj, "subjects", None) or []:
                subject.namespace = namespace
            client.apply(obj, field_manager="gpufailover-tests", force=True)


@pytest.fixture
def rbac_namespace(kube: KubeCluster, kube_namespace: str) -> Iterator[str]:
    yield kube_namespace
    # The bindings are cluster-wide: point them nowhere once the namespace is gone.
    from lightkube.resources.rbac_authorization_v1 import ClusterRoleBinding

    client = kube.client()
    for binding in client.list(ClusterRoleBinding):
        if any(s.namespace == kube_namespace for s in binding.subjects or []):
            client.delete(ClusterRoleBinding, binding.metadata.name)


def refused(call: Any) -> bool:
    try:
        call()
    except ApiError as exc:
        return exc.status.code == FORBIDDEN
    return False


async def test_quarantine_role_is_enough_for_the_actuator_and_nothing_more(
    kube: KubeCluster, rbac_namespace: str
) -> None:
    install(kube, rbac_namespace, "serviceaccounts.yaml", "rbac-quarantine.yaml")
    token = kube.service_account_token(rbac_namespace, "gpufailover-consumers", create=False)
    evidence = (Evidence("gpu-1", 0, "xid", 79, 1_000, "hardware"),)
    act = KubernetesActuator(kube.async_client(token))
    try:
        await act.apply(QUARANTINE, QuarantineRecord("gpu-1", "quarantined", "hardware",
                                                     evidence, None, 1_000))  # fmt: skip
        assert kube.client().get(Node, "gpu-1").spec.unschedulable is True
        assert await act.reconcile(lambda _: None) == 1  # list nodes: released, as desired
        await act.apply(RELEASE, QuarantineRecord("gpu-1", "released", "operator", (), None, 2))
    finally:
        await act.client.close()
    assert not kube.client().get(Node, "gpu-1").spec.unschedulable

    as_sa = kube.client(token)
    assert refused(lambda: as_sa.delete(Node, "gpu-2"))
    assert refused(lambda: as_sa.create(Node(metadata=ObjectMeta(name="rogue"))))
    assert refused(lambda: list(as_sa.list(Pod, namespace=rbac_namespace)))
    assert refused(lambda: as_sa.get(Secret, "any", namespace=rbac_namespace))
    assert kube.client().get(Node, "gpu-2").metadata.name == "gpu-2"


def test_k8s_events_role_reads_pods_only(kube: KubeCluster, rbac_namespace: str) -> None:
    install(kube, rbac_namespace, "rbac-k8s-events.yaml")
    token = kube.service_account_token(rbac_namespace, "gpufailover-k8s-events", create=False)
    as_sa = kube.client(token)
    assert list(as_sa.list(Pod, namespace=rbac_namespace)) == []
    assert refused(lambda: as_sa.delete(Pod, "any", namespace=rbac_namespace))
    assert refused(lambda: as_sa.get(Node, "gpu-1"))
    assert refused(lambda: as_sa.patch(Node, "gpu-1", {"spec": {"unschedulable": True}}))
