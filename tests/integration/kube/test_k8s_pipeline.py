"""The issue's end-to-end case on Kubernetes: real control plane (API server, Job controller,
scheduler) + real broker + `gpufailover run` (classifier, quarantine with the Kubernetes
actuator, requeue with the Kubernetes stage, job status) + `gpufailover k8s-events`. The test
only plays the kubelet (pod status reports) and the node agent (one XID record). Every wait
polls the API server or a topic with a deadline."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from lightkube.resources.core_v1 import Event, Node

from schemas.topics import TopicNames
from tests.integration.kafka_io import Rec, Service, cli, free_port, produce, short_grace_policy
from tests.integration.kafka_io import wait_for as wait_for_records
from tests.integration.kube.training_jobs import (
    FAILOVER_CLASS,
    FAILOVER_PRIORITY,
    ensure_extra_nodes,
    ensure_failover_priority_class,
    jobs_of,
    pods_of,
    report_failed,
    report_image_pull_backoff,
    report_running,
    training_job,
    wait_bound,
)
from tests.integration.kube_cluster import KubeCluster, wait_for

DEADLINE_S = 90.0
TAINT_KEY = "gpufailover.io/quarantine"


@pytest.fixture
def pipeline(
    kube: KubeCluster,
    kube_namespace: str,
    kafka_bootstrap: str,
    topic_names: TopicNames,
    topic_partitions: int,
    tmp_path: Path,
) -> Iterator[tuple[Service, Service]]:
    ensure_failover_priority_class(kube.client())
    ensure_extra_nodes(kube)
    env = {
        "GPUFAILOVER_STATE_DIR": str(tmp_path / "state"),
        "GPUFAILOVER_KUBECONFIG": str(kube.kubeconfig),
        "GPUFAILOVER_QUARANTINE_ACTUATOR": "kubernetes",
        "GPUFAILOVER_REQUEUE_SCHEDULER": "kubernetes",
        "GPUFAILOVER_REQUEUE_K8S_NAMESPACE": kube_namespace,
        "GPUFAILOVER_K8S_EVENTS_NAMESPACE": kube_namespace,
        "GPUFAILOVER_K8S_EVENTS_WATCH_TIMEOUT_S": "5",
        "GPUFAILOVER_TOPIC_PREFIX": topic_names.prefix,
        "GPUFAILOVER_POLICY": str(short_grace_policy(tmp_path, grace_s=2)),
        "GPUFAILOVER_CLASSIFIER_PORT": str(free_port()),
        "GPUFAILOVER_IDLE_AFTER_S": "0.5",
        "GPUFAILOVER_TICK_INTERVAL_S": "0.2",
        "GPUFAILOVER_FLEET_SIZE": "100",
    }
    args = ["run", "--bootstrap", kafka_bootstrap, "--topic-prefix", topic_names.prefix,
            "--partitions", str(topic_partitions)]  # fmt: skip
    events = ["k8s-events", "--bootstrap", kafka_bootstrap]
    with Service(args, tmp_path / "run.log", env) as run, \
            Service(events, tmp_path / "k8s-events.log", env) as watcher:  # fmt: skip
        yield run, watcher
    assert run.proc is not None and run.proc.returncode == 0, run.log_tail()
    assert watcher.proc is not None and watcher.proc.returncode == 0, watcher.log_tail()


def _now() -> int:
    return time.time_ns() // 1_000_000


def _statuses(recs: list[Rec], job: str) -> list[tuple[str, int]]:
    return [(r.value["status"], r.value["attempt"]) for r in recs if r.key == job]


@pytest.mark.timeout(280)
async def test_xid79_cordons_the_node_and_moves_the_job_oom_is_rejected_redelivery_acts_once(
    kube: KubeCluster,
    kube_namespace: str,
    pipeline: tuple[Service, Service],
    kafka_bootstrap: str,
    topic_names: TopicNames,
) -> None:
    run, watcher = pipeline
    admin, ns, n = kube.client(), kube_namespace, topic_names
    await watcher.wait_for_log("labelled pods listed", timeout_s=60)
    admin.create(training_job(ns, "train", "train-e2e", pods=4))
    first = wait_bound(admin, ns, "train-e2e", 0, 4)
    for pod in first:
        report_running(admin, pod)
    await wait_for_records(kafka_bootstrap, [n.jobs_events],
                           lambda rs: any(r.key == "train-e2e" for r in rs))  # fmt: skip

    bad = first[1].spec.nodeName
    await produce(kafka_bootstrap, [(n.gpu_xid, bad,
                  {"node": bad, "xid": 79, "ts_ms": _now(), "gpu_index": 3})])  # fmt: skip
    report_failed(admin, first[1], 1, "Error")  # the trainer on the GPU that fell off the bus

    try:
        moved = wait_bound(admin, ns, "train-e2e", 1, 4, timeout_s=DEADLINE_S)
    except TimeoutError as exc:
        raise AssertionError(f"{exc}\n{run.log_tail(60)}\n{watcher.log_tail(20)}") from None
    assert bad not in {p.spec.nodeName for p in moved}
    assert all(p.spec.priorityClassName == FAILOVER_CLASS for p in moved)
    assert all(p.spec.priority == FAILOVER_PRIORITY for p in moved)
    (job,) = jobs_of(admin, ns, "train-e2e")
    assert job.metadata.name == "train-r1"
    affinity = job.spec.template.spec.affinity.nodeAffinity
    term = affinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0]
    fields = term.matchFields
    assert ("metadata.name", "NotIn", [bad]) in [(f.key, f.operator, f.values) for f in fields]

    def quarantined() -> bool:
        node = admin.get(Node, bad)
        return bool(node.spec.unschedulable) and any(
            t.key == TAINT_KEY for t in node.spec.taints or []
        )

    wait_for(f"{bad} cordoned and tainted", quarantined, DEADLINE_S)

    # The relocated job cannot pull its image at first, then runs.
    report_image_pull_backoff(admin, moved[0])
    await wait_for_records(kafka_bootstrap, [n.jobs_status],
        lambda rs: ("Pending-imagepullbackoff", 1) in _statuses(rs, "train-e2e"))  # fmt: skip
    for pod in moved:
        report_running(admin, pod)
    recs = await wait_for_records(kafka_bootstrap, [n.jobs_status],
        lambda rs: _statuses(rs, "train-e2e")[-1:] == [("Running", 1)])  # fmt: skip
    (last,) = [r.value for r in recs if r.key == "train-e2e"][-1:]
    assert [(h["status"], h["attempt"]) for h in last["history"]] == [
        ("Running", 0),
        ("Pending-failoverinprogress", 0),
        ("Pending-imagepullbackoff", 1),
        ("Running", 1),
    ]

    # An OOM-killed trainer: rejected, no node touched, the Job stays as it is, annotated.
    admin.create(training_job(ns, "oom", "oom-e2e", pods=1))
    (oom,) = wait_bound(admin, ns, "oom-e2e", 0, 1)
    report_running(admin, oom)
    report_failed(admin, oom, 137, "OOMKilled")

    def annotated() -> bool:
        (j,) = jobs_of(admin, ns, "oom-e2e")
        return "gpufailover.io/decision" in (j.metadata.annotations or {})

    wait_for("the OOM job annotated with its decision", annotated, DEADLINE_S)
    (oom_job,) = jobs_of(admin, ns, "oom-e2e")
    assert "reject" in oom_job.metadata.annotations["gpufailover.io/decision"]
    assert not admin.get(Node, oom.spec.nodeName).spec.unschedulable
    requests = await wait_for_records(kafka_bootstrap, [n.quarantine_requests],
                                      lambda rs: len(rs) >= 1)  # fmt: skip
    assert {r.key for r in requests} == {bad}

    # A redelivered decision and a repeated requeue command change nothing.
    recs = await wait_for_records(kafka_bootstrap, [n.failover_decisions, n.jobs_requeue],
        lambda rs: any(r.topic == n.jobs_requeue and r.key == "train-e2e" for r in rs))  # fmt: skip
    again = [(r.topic, r.key, r.value) for r in recs if r.key == "train-e2e"]
    await produce(kafka_bootstrap, again)
    await run.wait_for_log("job train-e2e already requeued as", timeout_s=60)
    assert [j.metadata.uid for j in jobs_of(admin, ns, "train-e2e")] == [job.metadata.uid]
    assert len(pods_of(admin, ns, "train-e2e", 1)) == 4 and not pods_of(admin, ns, "train-e2e", 2)
    taints = [t for t in admin.get(Node, bad).spec.taints or [] if t.key == TAINT_KEY]
    assert len(taints) == 1

    # The Node says who did it and why, and has its Event; an operator release undoes it all.
    # The classifier's quarantine request (no job) or the job's decision, whichever the
    # quarantine service reads first, is the record acted on.
    note = json.loads((admin.get(Node, bad).metadata.annotations or {})[TAINT_KEY])
    assert (note["by"], note["reason"], note["cordoned_by_us"]) == ("gpufailover", "hardware", True)
    assert note["job_id"] in (None, "train-e2e")
    node_events = [e.reason for e in admin.list(Event, namespace="default")
                   if e.involvedObject.name == bad]  # fmt: skip
    assert node_events.count("GpufailoverQuarantined") == 1
    rc, _, err = await cli("quarantine", "release", bad, "--reason", "GPU replaced",
                           "--bootstrap", kafka_bootstrap, "--topic-prefix", n.prefix)  # fmt: skip
    assert rc == 0, err

    def released() -> bool:
        node = admin.get(Node, bad)
        return not node.spec.unschedulable and not any(
            t.key == TAINT_KEY for t in node.spec.taints or []
        )

    wait_for(f"{bad} uncordoned and untainted after the release", released, DEADLINE_S)
    assert TAINT_KEY not in (admin.get(Node, bad).metadata.annotations or {})
