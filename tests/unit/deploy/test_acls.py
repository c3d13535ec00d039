"""The role ACL catalog: least privilege, every name a declared topic, each role's own groups."""

from __future__ import annotations

from deploy.acls import BY_NAME as ROLES
from deploy.acls import ROLE_NAMES, AclBinding, Operation, Pattern, Resource, all_bindings, bindings


def writes(role: str, prefix: str = "p.") -> set[str]:
    return {
        b.name
        for b in bindings(ROLES[role], prefix)
        if b.resource == Resource.TOPIC and b.operation == Operation.WRITE
    }


def test_one_role_per_component() -> None:
    assert set(ROLE_NAMES) == {
        "agent", "scheduler", "telemetry", "classifier", "quarantine", "requeue", "job-status",
        "operator", "deployer", "k8s-events",
    }  # fmt: skip


def test_producers_at_the_edge_write_their_topics_only() -> None:
    assert writes("agent") == {"p.gpu.xid", "p.gpu.health", "p.nodes.validation-results"}
    assert writes("scheduler") == {"p.jobs.events"}
    assert writes("telemetry") == {"p.training.telemetry"}
    for role in ("scheduler", "telemetry"):
        assert all(b.operation == Operation.WRITE for b in bindings(ROLES[role], "p."))


def test_agents_read_validation_requests_and_nothing_else() -> None:
    reads = {
        b.name
        for b in bindings(ROLES["agent"], "p.")
        if b.resource == Resource.TOPIC and b.operation == Operation.READ
    }
    assert reads == {"p.nodes.validate"}


def test_only_the_quarantine_service_writes_validation_requests() -> None:
    assert {r for r in ROLE_NAMES if "p.nodes.validate" in writes(r)} == {"quarantine"}


def test_only_operators_write_the_audit_topic_and_only_they_and_quarantine_write_releases() -> None:
    audit = {r for r in ROLE_NAMES if "p.operators.audit" in writes(r)}
    quarantine = {r for r in ROLE_NAMES if "p.nodes.quarantine" in writes(r)}
    decisions = {r for r in ROLE_NAMES if "p.failover.decisions" in writes(r)}
    assert audit == {"operator"}
    assert quarantine == {"operator", "quarantine"}
    assert decisions == {"classifier"}


def test_services_use_their_own_groups_and_transactional_ids_by_prefix() -> None:
    quarantine = bindings(ROLES["quarantine"], "p.")
    assert AclBinding(
        "User:quarantine", Resource.GROUP, "p.gpufailover-quarantine", Pattern.PREFIXED,
        Operation.READ,
    ) in quarantine  # fmt: skip
    assert AclBinding(
        "User:quarantine", Resource.TRANSACTIONAL_ID, "p.gpufailover-quarantine",
        Pattern.PREFIXED, Operation.WRITE,
    ) in quarantine  # fmt: skip
    assert not [b for b in bindings(ROLES["agent"]) if b.resource != Resource.TOPIC]


def test_readers_may_dead_letter_their_inputs() -> None:
    assert "p.failover.decisions.dlq" in writes("requeue")
    assert "p.gpu.xid.dlq" in writes("classifier")
    assert "p.gpu.xid.dlq" not in writes("agent")


def test_a_role_can_be_mapped_to_another_user_name() -> None:
    binds = all_bindings("", {"agent": "node-agent"})
    principals = {b.principal for b in binds if b.name == "gpu.xid"}
    assert "User:node-agent" in principals and "User:agent" not in principals


def test_every_k8s_container_runs_as_a_declared_role_with_its_own_password() -> None:
    from pathlib import Path

    import yaml

    k8s = Path(__file__).resolve().parents[3] / "deploy" / "k8s"
    seen: set[str] = set()
    workloads = [
        (path, doc)
        for path in k8s.glob("*.yaml")
        for doc in yaml.safe_load_all(path.read_text())
        if doc and doc.get("kind") in ("Deployment", "DaemonSet", "StatefulSet")
    ]
    assert workloads
    for path, workload in workloads:
        pod = workload["spec"]["template"]["spec"]
        for container in pod.get("initContainers", []) + pod["containers"]:
            env = {e["name"]: e.get("value") for e in container.get("env", [])}
            users = {k: v for k, v in env.items() if k.endswith("SASL_USERNAME")}
            assert users, f"{path.name}/{container['name']} has no Kafka user"
            for key, user in users.items():
                assert user in ROLE_NAMES, (path.name, user)
                password = env[key.replace("USERNAME", "PASSWORD_FILE")]
                assert password == f"/etc/gpufailover/kafka/{user}"
                seen.add(user)
    assert seen == set(ROLE_NAMES) - {"scheduler", "telemetry", "operator"}  # not pods here
