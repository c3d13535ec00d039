"""The quarantine service with `--actuator kubernetes` on the real broker and API server:
requests cordon and taint Nodes, an operator release undoes only our marks, a refused API call
is retried with back-off (and counted) until it works, dry-run touches nothing."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from lightkube import ApiError, codecs
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.models.rbac_v1 import RoleRef, Subject
from lightkube.resources.core_v1 import Event, Node
from lightkube.resources.rbac_authorization_v1 import ClusterRoleBinding
from prometheus_client import CollectorRegistry

from consumers.quarantine.actuator_k8s import KubernetesActuator
from consumers.quarantine.app import run_quarantine
from consumers.quarantine.breaker import BreakerConfig
from consumers.quarantine.config import QuarantineSettings
from deploy.topics import TopicNames
from gpufailover.backoff import Backoff
from tests.integration.kafka_io import Service, service
from tests.integration.kube_cluster import KubeCluster, wait_for
from tests.integration.test_consumers import (
    cli,
    common,
    produce,
    quarantined_record,
    running,
    until,
    wait_consumed,
)

K8S = Path(__file__).resolve().parents[3] / "deploy" / "k8s"
DEADLINE_S = 60.0


def node(kube: KubeCluster, name: str) -> Any:
    return kube.client().get(Node, name)


def events(kube: KubeCluster, name: str) -> list[str]:
    return [e.reason for e in kube.client().list(Event, namespace="default")
            if e.involvedObject.name == name and e.reason.startswith("Gpufailover")]  # fmt: skip


def cordoned(kube: KubeCluster) -> list[str]:
    return [name for name in kube.nodes if node(kube, name).spec.unschedulable]


def quarantined(kube: KubeCluster, name: str) -> Callable[[], bool]:
    return lambda: bool(node(kube, name).spec.unschedulable and node(kube, name).spec.taints)


@pytest.fixture
def quarantine_service(
    kube: KubeCluster, kafka_bootstrap: str, topic_names: TopicNames, tmp_path: Path
) -> Iterator[Service]:
    args = ("--actuator", "kubernetes", "--kubeconfig", str(kube.kubeconfig),
            "--instance-id", "test", "--fleet-size", "100")  # fmt: skip
    with service("quarantine", kafka_bootstrap, topic_names.prefix, tmp_path, *args) as svc:
        yield svc


async def test_requests_quarantine_nodes_and_release_leaves_a_foreign_cordon(
    kube: KubeCluster,
    kafka_bootstrap: str,
    topic_names: TopicNames,
    quarantine_service: Service,
) -> None:
    b, n = kafka_bootstrap, topic_names
    kube.client().patch(Node, "gpu-3", {"spec": {"unschedulable": True}})  # an operator's
    requests: list[tuple[str, str | None, Any]] = [
        (n.quarantine_requests, name, quarantined_record(name, 1_000 + i))
        for i, name in enumerate(("gpu-2", "gpu-3"))
    ]
    await produce(b, requests + requests[:1])  # gpu-2's request delivered twice
    wait_for("gpu-2 quarantined", quarantined(kube, "gpu-2"), DEADLINE_S)
    wait_for("gpu-3 tainted", quarantined(kube, "gpu-3"), DEADLINE_S)
    await wait_consumed(b, f"{n.prefix}gpufailover-quarantine", n.quarantine_requests)
    await wait_consumed(b, f"{n.prefix}gpufailover-quarantine-actuator", n.nodes_quarantine)
    assert events(kube, "gpu-2") == ["GpufailoverQuarantined"]  # acted once
    assert not node(kube, "gpu-1").spec.unschedulable

    target = ("--bootstrap", b, "--topic-prefix", n.prefix)
    for name in ("gpu-2", "gpu-3"):
        assert await cli("quarantine", "release", name, "--reason", "GPU replaced", *target) == 0
    wait_for("gpu-2 released", lambda: not node(kube, "gpu-2").spec.unschedulable, DEADLINE_S)
    wait_for("gpu-3 untainted", lambda: not node(kube, "gpu-3").spec.taints, DEADLINE_S)
    await quarantine_service.wait_for_log("left it cordoned: not cordoned by gpufailover")
    assert node(kube, "gpu-3").spec.unschedulable is True
    assert not node(kube, "gpu-2").spec.taints


@pytest.fixture
def unbound_user(kube: KubeCluster) -> Iterator[str]:
    """The static user `quarantine-actuator`, with no role yet; its binding removed after."""
    client = kube.client()
    for obj in codecs.load_all_yaml((K8S / "rbac-quarantine.yaml").read_text()):
        if obj.kind == "ClusterRole":
            client.apply(obj, field_manager="gpufailover-tests", force=True)
    yield "quarantine-actuator"
    with contextlib.suppress(ApiError):  # absent if the test failed before binding it
        client.delete(ClusterRoleBinding, "test-quarantine-actuator")


def bind(kube: KubeCluster, user: str) -> None:
    kube.client().create(
        ClusterRoleBinding(
            metadata=ObjectMeta(name="test-quarantine-actuator"),
            roleRef=RoleRef(apiGroup="rbac.authorization.k8s.io", kind="ClusterRole",
                            name="gpufailover-quarantine"),
            subjects=[Subject(kind="User", name=user, apiGroup="rbac.authorization.k8s.io")],
        )
    )  # fmt: skip


def settings(
    b: str, n: TopicNames, *, dry_run: bool = False, breaker: BreakerConfig | None = None
) -> QuarantineSettings:
    return QuarantineSettings(common(b, n, "quarantine"), breaker or BreakerConfig(fleet_size=100),
                              dry_run=dry_run, actuator_backoff=Backoff(100, 400))  # fmt: skip


async def test_a_refused_actuation_is_retried_with_backoff_until_the_role_is_bound(
    kube: KubeCluster, kafka_bootstrap: str, topic_names: TopicNames, unbound_user: str
) -> None:
    b, n = kafka_bootstrap, topic_names
    registry = CollectorRegistry()
    actuator = KubernetesActuator(kube.async_client(kube.tokens[unbound_user]))

    def errors() -> float:
        """Refused calls: the reconcile on start (list nodes) comes first, then the actions."""
        return sum(
            registry.get_sample_value(
                "gpufailover_quarantine_actuator_errors_total", {"action": action}
            )
            or 0.0
            for action in ("reconcile", "quarantine")
        )

    run = lambda stop: run_quarantine(settings(b, n), stop, registry=registry, actuator=actuator)  # noqa: E731
    try:
        async with running(run):
            await produce(b, [(n.quarantine_requests, "gpu-4", quarantined_record("gpu-4", 10))])
            await until(lambda: errors() >= 2)  # 403 Forbidden, retried with back-off
            assert not node(kube, "gpu-4").spec.unschedulable
            bind(kube, unbound_user)
            await until(quarantined(kube, "gpu-4"))
            await wait_consumed(b, f"{n.prefix}quarantine-actuator", n.nodes_quarantine)
    finally:
        await actuator.client.close()
    assert errors() >= 2


async def test_dry_run_touches_no_node(
    kube: KubeCluster, kafka_bootstrap: str, topic_names: TopicNames
) -> None:
    b, n = kafka_bootstrap, topic_names
    actuator = KubernetesActuator(kube.async_client())
    registry = CollectorRegistry()
    run = lambda stop: run_quarantine(settings(b, n, dry_run=True), stop, registry=registry,  # noqa: E731
                                      actuator=actuator)  # fmt: skip
    try:
        async with running(run):
            await produce(b, [(n.quarantine_requests, "gpu-1", quarantined_record("gpu-1", 10))])
            await wait_consumed(b, f"{n.prefix}quarantine", n.quarantine_requests)
    finally:
        await actuator.client.close()
    assert not node(kube, "gpu-1").spec.unschedulable and not node(kube, "gpu-1").spec.taints
    calls = registry.get_sample_value(
        "gpufailover_quarantine_actuator_calls_total", {"action": "quarantine"}
    )
    assert not calls


async def test_the_breaker_stops_a_wave_before_it_reaches_the_cluster(
    kube: KubeCluster, kafka_bootstrap: str, topic_names: TopicNames
) -> None:
    b, n = kafka_bootstrap, topic_names
    actuator = KubernetesActuator(kube.async_client())
    wave = settings(b, n, breaker=BreakerConfig(max_nodes=1, fleet_size=100))
    run = lambda stop: run_quarantine(wave, stop, registry=CollectorRegistry(),  # noqa: E731
                                      actuator=actuator)  # fmt: skip
    try:
        async with running(run):
            await produce(b, [(n.quarantine_requests, f"gpu-{i}", quarantined_record(f"gpu-{i}", i))
                              for i in (1, 2, 3)])  # fmt: skip
            await until(lambda: bool(cordoned(kube)))  # the groups exist by then
            await wait_consumed(b, f"{n.prefix}quarantine", n.quarantine_requests)
            await wait_consumed(b, f"{n.prefix}quarantine-actuator", n.nodes_quarantine)
    finally:
        await actuator.client.close()
    assert len(cordoned(kube)) == 1  # the first; the breaker refused the other two


async def test_a_restart_puts_back_marks_removed_while_the_service_was_down(
    kube: KubeCluster, kafka_bootstrap: str, topic_names: TopicNames, tmp_path: Path
) -> None:
    b, n = kafka_bootstrap, topic_names
    args = ("--actuator", "kubernetes", "--kubeconfig", str(kube.kubeconfig),
            "--instance-id", "test", "--fleet-size", "100")  # fmt: skip
    with service("quarantine", b, n.prefix, tmp_path, *args):
        await produce(b, [(n.quarantine_requests, "gpu-1", quarantined_record("gpu-1", 10))])
        wait_for("gpu-1 quarantined", quarantined(kube, "gpu-1"), DEADLINE_S)
    # While it is down, someone runs `kubectl uncordon` and removes the taint: gpu-1 is still
    # quarantined on nodes.quarantine, so the restarted service reconciles it back.
    kube.client().patch(Node, "gpu-1", {"spec": {"unschedulable": None, "taints": None}})
    with service("quarantine", b, n.prefix, tmp_path, *args) as restarted:
        await restarted.wait_for_log("kubernetes reconcile: gpu-1 is quarantined but lacks")
        wait_for("gpu-1 quarantined again", quarantined(kube, "gpu-1"), DEADLINE_S)
