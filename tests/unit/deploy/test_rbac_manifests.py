"""deploy/k8s RBAC: one ClusterRole per component, least privilege, each bound and used."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

K8S = Path(__file__).resolve().parents[3] / "deploy" / "k8s"


def _docs() -> list[dict[str, Any]]:
    docs: list[dict[str, Any]] = []
    for path in sorted(K8S.glob("*.yaml")):
        docs += [d for d in yaml.safe_load_all(path.read_text()) if d]
    return docs


def _of_kind(kind: str) -> dict[str, dict[str, Any]]:
    return {d["metadata"]["name"]: d for d in _docs() if d.get("kind") == kind}


def _grants(role: dict[str, Any]) -> set[tuple[str, str, str]]:
    return {
        (group, resource, verb)
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }


def test_quarantine_role_is_exactly_nodes_get_list_patch_and_events_create() -> None:
    role = _of_kind("ClusterRole")["gpufailover-quarantine"]
    assert _grants(role) == {
        ("", "nodes", "get"),
        ("", "nodes", "list"),
        ("", "nodes", "patch"),
        ("", "events", "create"),
    }


def test_k8s_events_role_only_reads_pods() -> None:
    role = _of_kind("ClusterRole")["gpufailover-k8s-events"]
    assert {(g, r) for g, r, _ in _grants(role)} == {("", "pods")}
    assert {v for _, _, v in _grants(role)} <= {"get", "list", "watch"}


def test_no_role_uses_wildcards_or_touches_secrets() -> None:
    for name, role in _of_kind("ClusterRole").items():
        for group, resource, verb in _grants(role):
            assert "*" not in (group, resource, verb), name
            assert resource != "secrets", name


def test_every_binding_names_an_existing_role_and_service_account() -> None:
    roles, accounts = _of_kind("ClusterRole"), _of_kind("ServiceAccount")
    bindings = _of_kind("ClusterRoleBinding")
    assert set(bindings) >= {"gpufailover-quarantine", "gpufailover-k8s-events"}
    for binding in bindings.values():
        assert binding["roleRef"]["name"] in roles
        for subject in binding["subjects"]:
            assert subject["kind"] == "ServiceAccount"
            assert subject["name"] in accounts


def test_pods_use_their_account_and_kafka_only_pods_mount_no_token() -> None:
    workloads = {**_of_kind("Deployment"), **_of_kind("DaemonSet")}
    accounts = _of_kind("ServiceAccount")
    consumers = workloads["gpufailover-consumers"]["spec"]["template"]["spec"]
    assert consumers["serviceAccountName"] == "gpufailover-consumers"
    bound = {
        b["roleRef"]["name"]
        for b in _of_kind("ClusterRoleBinding").values()
        if any(s["name"] == "gpufailover-consumers" for s in b["subjects"])
    }
    assert "gpufailover-quarantine" in bound
    for name in ("gpufailover-classifier", "gpufailover-agent"):
        pod = workloads[name]["spec"]["template"]["spec"]
        assert pod["automountServiceAccountToken"] is False, name
    for pod in (w["spec"]["template"]["spec"] for w in workloads.values()):
        assert pod.get("serviceAccountName", "default") in {*accounts, "default"}


def test_requeue_role_is_exactly_what_the_kubernetes_requeue_does() -> None:
    role = _of_kind("ClusterRole")["gpufailover-requeue"]
    assert _grants(role) == {
        ("batch", "jobs", "list"),
        ("batch", "jobs", "create"),
        ("batch", "jobs", "delete"),
        ("batch", "jobs", "patch"),
        ("scheduling.k8s.io", "priorityclasses", "get"),
    }


def test_k8s_events_runs_once_with_its_own_account_and_the_failover_class_is_shipped() -> None:
    deployment = _of_kind("Deployment")["gpufailover-k8s-events"]
    assert deployment["spec"]["replicas"] == 1
    pod = deployment["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "gpufailover-k8s-events"
    assert pod["containers"][0]["args"][0] == "k8s-events"
    (cls,) = _of_kind("PriorityClass").values()
    assert cls["metadata"]["name"] == "gpufailover-failover" and cls["value"] > 0
    assert cls["globalDefault"] is False
