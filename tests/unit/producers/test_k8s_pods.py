"""Reading a training pod's API object: who it belongs to and how it ended (no API server)."""

from __future__ import annotations

from typing import Any

import pytest
from k8s_pod_fakes import (
    T0_MS,
    container,
    disrupted,
    failed,
    image_pull_backoff,
    pod,
    running,
    succeeded,
)

from producers.k8s.pods import BadPod, Ending, pod_view

NOW = T0_MS + 999_000


def view(p: dict[str, Any], deleted: bool = False) -> Any:
    return pod_view(p, now_ms=NOW, deleted=deleted)


def test_a_pod_without_the_job_id_label_is_not_a_training_pod() -> None:
    p = pod()
    del p["metadata"]["labels"]["gpufailover.io/job-id"]
    assert view(p) is None


def test_a_running_pod_names_its_job_attempt_node_start_and_owner() -> None:
    v = view(running(started=5, attempt=2, node="gpu-3"))
    assert (v.job_id, v.attempt, v.node, v.phase) == ("train-7", 2, "gpu-3", "Running")
    assert v.started_ms == T0_MS + 5_000 and v.ended is None and not v.succeeded
    assert (v.owner, v.priority, v.failover, v.training_type) == ("train", 1000, True, "on_demand")


def test_the_attempt_label_is_absent_on_a_first_run() -> None:
    assert view(running()).attempt == 0


@pytest.mark.parametrize(
    ("reason", "code", "expected"),
    [("OOMKilled", 137, Ending(T0_MS + 50_000, "OOMKilled", 137)),
     ("Error", 1, Ending(T0_MS + 50_000, "Error", 1))],
)  # fmt: skip
def test_a_failed_container_gives_its_reason_code_and_finish_time(
    reason: str, code: int, expected: Ending
) -> None:
    assert view(failed(code=code, reason=reason)).ended == expected


def test_the_first_container_that_failed_is_the_one_reported() -> None:
    p = failed(code=137, reason="OOMKilled")
    ok = {
        "terminated": {"exitCode": 0, "reason": "Completed", "finishedAt": "2026-12-01T10:00:40Z"}
    }
    p["status"]["containerStatuses"].insert(0, container(ok, "sidecar"))
    assert view(p).ended.reason == "OOMKilled"


@pytest.mark.parametrize(
    ("condition", "reason"),
    [("DeletionByTaintManager", "WorkerLost"), ("DeletionByPodGC", "WorkerLost"),
     ("PreemptionByScheduler", "Preempted"), ("EvictionByEvictionAPI", "Evicted"),
     ("TerminationByKubelet", "Evicted")],
)  # fmt: skip
def test_a_pod_kubernetes_killed_itself_says_why(condition: str, reason: str) -> None:
    p = disrupted(running(), condition, when=60)
    assert view(p, deleted=True).ended == Ending(T0_MS + 60_000, reason, None)


def test_a_disruption_not_carried_out_yet_is_no_ending() -> None:
    p = disrupted(running(), "PreemptionByScheduler")
    del p["metadata"]["deletionTimestamp"]
    assert view(p).ended is None


@pytest.mark.parametrize(("status_reason", "reason"), [("NodeLost", "WorkerLost"),
                                                        ("Evicted", "Evicted")])  # fmt: skip
def test_a_pod_the_kubelet_failed_gives_the_kubelets_reason(
    status_reason: str, reason: str
) -> None:
    p = failed(code=137, reason="Error")
    p["status"]["reason"] = status_reason
    assert view(p).ended == Ending(T0_MS + 50_000, reason, 137)


def test_a_pod_deleted_by_its_owner_has_no_ending() -> None:
    assert view(running(), deleted=True).ended is None


def test_image_pull_failures_and_success_are_seen() -> None:
    assert view(image_pull_backoff()).image_pull == "ImagePullBackOff"
    done = view(succeeded(ended=90))
    assert done.succeeded and done.finished_ms == T0_MS + 90_000 and done.ended is None


def test_policy_labels_are_read() -> None:
    labels = {"gpufailover.io/failover": "false", "gpufailover.io/training-type": "spot",
              "gpufailover.io/max-failovers": "5"}  # fmt: skip
    v = view(running(labels=labels))
    assert (v.failover, v.training_type, v.max_failovers) == (False, "spot", 5)


@pytest.mark.parametrize(
    ("label", "value"),
    [("gpufailover.io/attempt", "first"), ("gpufailover.io/training-type", "cheap"),
     ("gpufailover.io/max-failovers", "-1")],
)  # fmt: skip
def test_unreadable_labels_are_a_clear_error(label: str, value: str) -> None:
    with pytest.raises(BadPod, match=label):
        view(running(labels={label: value}))


def test_a_pod_read_through_lightkube_reads_the_same() -> None:
    from lightkube.resources.core_v1 import Pod

    for p in (running(), failed(code=137, reason="OOMKilled"), image_pull_backoff(),
              disrupted(running(), "DeletionByPodGC")):  # fmt: skip
        assert view(Pod.from_dict(p).to_dict(), deleted=True) == view(p, deleted=True)
