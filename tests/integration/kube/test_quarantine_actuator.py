"""The Kubernetes quarantine actuator against the real API server (no broker: it only talks to
the API server; test_quarantine_service.py drives it from Kafka)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from lightkube import ApiError
from lightkube.resources.core_v1 import Event, Node

from consumers.quarantine.actions import QUARANTINE, RELEASE
from consumers.quarantine.actuator_k8s import KubernetesActuator
from consumers.quarantine.k8s_node import ANNOTATION, NodeView, TaintSpec, quarantine_patch
from schemas.decisions import Evidence
from schemas.quarantine import QuarantineRecord
from tests.integration.kube_cluster import KubeCluster

XID79 = Evidence("gpu-2", 3, "xid", 79, 1_000, "hardware")
OPERATOR_TAINT = {"key": "example.com/maintenance", "value": "fan", "effect": "NoSchedule"}


def record(node: str, state: str = "quarantined", ts_ms: int = 1_000) -> QuarantineRecord:
    return QuarantineRecord(node, state, "hardware" if state == "quarantined" else "operator",
                            (XID79,), "42", ts_ms)  # fmt: skip


@pytest.fixture
async def actuator(kube: KubeCluster) -> AsyncIterator[KubernetesActuator]:
    act = KubernetesActuator(kube.async_client())
    yield act
    await act.client.close()


def node(kube: KubeCluster, name: str) -> Any:
    return kube.client().get(Node, name)


def our_events(kube: KubeCluster, name: str) -> list[Any]:
    return [
        e
        for e in kube.client().list(Event, namespace="default")
        if e.involvedObject.name == name and e.reason.startswith("Gpufailover")
    ]


def taints(obj: Any) -> list[dict[str, Any]]:
    return [t.to_dict() for t in (obj.spec.taints or [])]


async def test_quarantine_cordons_taints_annotates_and_records_one_event(
    kube: KubeCluster, actuator: KubernetesActuator
) -> None:
    await actuator.apply(QUARANTINE, record("gpu-2"))
    first = node(kube, "gpu-2")
    await actuator.apply(QUARANTINE, record("gpu-2"))  # redelivered: no patch, no second event
    again = node(kube, "gpu-2")
    assert again.metadata.resourceVersion == first.metadata.resourceVersion
    assert again.spec.unschedulable is True
    assert taints(again) == [
        {"key": "gpufailover.io/quarantine", "value": "hardware", "effect": "NoSchedule"}
    ]
    note = json.loads(again.metadata.annotations[ANNOTATION])
    assert (note["reason"], note["evidence"], note["job_id"]) == ("hardware", "xid 79 gpu 3", "42")
    assert note["cordoned_by_us"] is True and note["record_ts_ms"] == 1_000
    (event,) = our_events(kube, "gpu-2")
    assert (event.type, event.reason) == ("Warning", "GpufailoverQuarantined")
    assert event.involvedObject.uid == again.metadata.uid
    assert "xid 79 gpu 3" in event.message
    assert not node(kube, "gpu-1").spec.unschedulable  # only the named node


async def test_release_removes_only_our_marks(
    kube: KubeCluster, actuator: KubernetesActuator
) -> None:
    client = kube.client()
    operator = {"spec": {"taints": [OPERATOR_TAINT]},
                "metadata": {"annotations": {"example.com/ticket": "7"}}}  # fmt: skip
    client.patch(Node, "gpu-3", operator)
    await actuator.apply(QUARANTINE, record("gpu-3"))
    assert len(taints(node(kube, "gpu-3"))) == 2
    await actuator.apply(RELEASE, record("gpu-3", "released", ts_ms=2_000))
    released = node(kube, "gpu-3")
    assert not released.spec.unschedulable
    assert taints(released) == [OPERATOR_TAINT]
    annotations = released.metadata.annotations
    assert ANNOTATION not in annotations and annotations["example.com/ticket"] == "7"
    reasons = sorted(e.reason for e in our_events(kube, "gpu-3"))
    assert reasons == ["GpufailoverQuarantined", "GpufailoverReleased"]
    await actuator.apply(RELEASE, record("gpu-3", "released", ts_ms=2_000))  # again: nothing
    assert node(kube, "gpu-3").metadata.resourceVersion == released.metadata.resourceVersion


async def test_a_node_cordoned_by_someone_else_stays_cordoned_after_our_release(
    kube: KubeCluster, actuator: KubernetesActuator
) -> None:
    kube.client().patch(Node, "gpu-4", {"spec": {"unschedulable": True}})  # kubectl cordon
    await actuator.apply(QUARANTINE, record("gpu-4"))
    note = json.loads(node(kube, "gpu-4").metadata.annotations[ANNOTATION])
    assert note["cordoned_by_us"] is False
    await actuator.apply(RELEASE, record("gpu-4", "released", ts_ms=2_000))
    released = node(kube, "gpu-4")
    assert released.spec.unschedulable is True
    assert not released.spec.taints and ANNOTATION not in (released.metadata.annotations or {})


async def test_no_execute_taint_and_an_unknown_node_is_skipped(kube: KubeCluster) -> None:
    act = KubernetesActuator(kube.async_client(),
                             taint=TaintSpec("example.com/bad-gpu", "NoExecute"))  # fmt: skip
    try:
        await act.apply(QUARANTINE, record("gpu-1"))
        await act.apply(QUARANTINE, record("no-such-node"))  # logged, nothing to cordon
    finally:
        await act.client.close()
    assert taints(node(kube, "gpu-1")) == [
        {"key": "example.com/bad-gpu", "value": "hardware", "effect": "NoExecute"}
    ]


async def test_reconcile_reapplies_what_was_undone_and_releases_what_was_released(
    kube: KubeCluster, actuator: KubernetesActuator
) -> None:
    # While the service was away: someone uncordoned gpu-1 and removed its taint (still
    # quarantined for us), and gpu-2, quarantined by us, was released on nodes.quarantine.
    await actuator.apply(QUARANTINE, record("gpu-1"))
    await actuator.apply(QUARANTINE, record("gpu-2"))
    kube.client().patch(Node, "gpu-1", {"spec": {"unschedulable": None, "taints": None}})
    desired = {"gpu-1": record("gpu-1"), "gpu-2": record("gpu-2", "released", ts_ms=2_000)}
    assert await actuator.reconcile(desired.get) == 2
    gpu1, gpu2 = node(kube, "gpu-1"), node(kube, "gpu-2")
    assert gpu1.spec.unschedulable is True and len(taints(gpu1)) == 1
    assert not gpu2.spec.unschedulable and not gpu2.spec.taints
    assert await actuator.reconcile(desired.get) == 0  # now in agreement


def test_a_patch_computed_from_a_stale_node_is_refused(kube: KubeCluster) -> None:
    """The resourceVersion in the patch: someone else's change in between -> 409, and the
    actuation stage retries from a fresh read instead of overwriting their taints."""
    stale = NodeView.from_node(node(kube, "gpu-1"))
    kube.client().patch(Node, "gpu-1", {"spec": {"taints": [OPERATOR_TAINT]}})
    with pytest.raises(ApiError) as conflict:
        kube.client().patch(Node, "gpu-1", quarantine_patch(stale, record("gpu-1"), TaintSpec(), 0))
    assert conflict.value.status.code == 409
    assert taints(node(kube, "gpu-1")) == [OPERATOR_TAINT]
